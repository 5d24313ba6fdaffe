"""Sizes in memory units for the solvers.

Profiled sizes are bytes whose common divisor is tiny (often 4), so exact solvers, whose
tables or models grow with budget / gcd, would be slow or huge.  Solvers are therefore run
on the chain with every size rounded *up* to a multiple of a unit: a schedule that fits a
budget in the rounded chain fits it in the real chain too (each peak is a sum of sizes), and
its real peak and makespan are obtained by replaying it on the real chain with the
simulator.  Optimality claims then refer to the rounded chain; the rounding adds at most
(L + 4) units to any peak (x_0, one value per stage, the gradient, the value produced and
the overhead).  Pure Python; no torch needed.
"""
from __future__ import annotations

from remat_theory.model.chain import Chain


def auto_unit(chain, units: int = 2048) -> int:
    """A power of two near store-all / ``units`` bytes (at least 1)."""
    target = chain.store_all_memory() / units
    unit = 1
    while unit * 2 <= target:
        unit *= 2
    return unit


def rounded_chain(chain, unit: int):
    """The chain with every size rounded up to a multiple of ``unit`` bytes."""
    def up(values):
        return [-(-v // unit) * unit for v in values]

    return chain.replace(x_size=up(chain.x_size), tape_size=up(chain.tape_size),
                         fwd_overhead=up(chain.fwd_overhead), bwd_overhead=up(chain.bwd_overhead),
                         fall_overhead=up(chain.fall_overhead))


