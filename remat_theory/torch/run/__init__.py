"""Run: a schedule executed with autograd (the fourth room).

``executor`` (any schedule of the operation table, op by op), ``nested`` (the nested form
built from a schedule, run by ``torch.utils.checkpoint``), ``offload_executor`` (schedules
with host copies), ``carried`` (what a run carries between stages: the values the prefix
stage hands on, RNG states).  docs/architecture.md has the map.
"""
