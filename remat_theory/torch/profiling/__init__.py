"""Profile: costs of a chain of stages measured on the device (the second room).

``tracker`` (the meters: live tensor bytes, the caching allocator), ``profiler`` (times and
bytes of every operation of the model -> a :class:`~remat_theory.model.chain.Chain`),
``bandwidth`` (the host copy channel).  docs/architecture.md has the map.
"""
