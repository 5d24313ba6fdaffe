"""Plan: a solver's schedule for a profiled chain and a budget (the third room).

``rounding`` (bytes to the slot unit the solvers take), ``levels`` (the schedules a budget
admits, with the state bytes the step adds), ``budget`` (budgets given in bytes, fractions
or strings).  docs/architecture.md has the map.
"""
