"""Ground floor: the chain model, operations and schedules, the simulator that judges
every schedule, the result type of every solver, the schedule classes and the errors.

Pure Python and numpy.  Nothing here imports from :mod:`solvers`,
:mod:`remat_theory.analysis`, :mod:`remat_theory.cli` or :mod:`remat_theory.torch`
(``tests/test_layers.py`` checks it).  The model is stated in ``docs/model.md``.
"""
