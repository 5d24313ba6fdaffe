"""Top floor, beside the command line: cross-checking solvers (``verify``), certificates,
the hard-instance search, benchmarks, plots, parallel sweeps, instance families and the
NP-hardness reduction.  Builds on :mod:`remat_theory.model` and :mod:`solvers`; never
imports torch.
"""
