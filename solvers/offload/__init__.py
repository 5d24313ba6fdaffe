"""Offloading: the solvers of the two-stream model (a chain with a ``bandwidth``: values
copied to host memory and back while the device computes; docs/model.md, "Offloading";
the proofs are proofs/offload.md, the referee :mod:`remat_theory.model.offload`).

The package, one way (each module imports only those above it in this list, and never
this ``__init__``):

- :mod:`.copies`: what moves over the channel, its size and its copy time;
- :mod:`.min_budget`: the smallest feasible budget with the channel, searched over eager
  schedules (proofs/offload.md O.23);
- :mod:`.exhaustive`: ``exhaustive-offload`` (best-first search over the referee's states,
  exact over every schedule) and the smallest feasible budget with the channel
  (:func:`~solvers.offload.exhaustive.min_feasible_budget`, a bottleneck over placements);
- :mod:`.normal`: the normal form of O.20 and its length bound (O.21);
- :mod:`.ilp_bounds`: the length bounds of the MILP's certificate (O.14, O.15);
- :mod:`.ilp_model`: the MILP over N positions (HiGHS);
- :mod:`.ilp`: ``ilp-offload`` (incumbent, certificate, answer);
- :mod:`.dp_split`, :mod:`.dp_defer`, :mod:`.dp_table`, :mod:`.dp_min_budget`, :mod:`.dp`:
  ``dp-offload``, the persistent DP with offloading (its splits reduced by the numba
  or numpy kernel, its deferred offloads, its tables, its class's smallest budget, the
  registered solver);
- :mod:`.baselines`: ``save-on-cpu`` and ``offload-all``;
- :mod:`.auto`: the route ``auto`` takes on a chain with a channel.

Importing the package registers its solvers (the registry imports it with the others).
"""
from solvers.offload import baselines, dp, exhaustive, ilp  # noqa: F401 - registrations
