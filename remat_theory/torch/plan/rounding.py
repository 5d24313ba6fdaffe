"""Sizes in memory units for the solvers.

Profiled sizes are bytes whose common divisor is tiny (often 4), so exact solvers, whose
tables or models grow with budget / gcd, would be slow or huge.  Solvers are therefore run
on the chain with every size rounded *up* to a multiple of a unit: a schedule that fits a
budget in the rounded chain fits it in the real chain too (each peak is a sum of sizes), and
its real peak and makespan are obtained by replaying it on the real chain with the
simulator.  Optimality claims then refer to the rounded chain.  A peak is the sum of the
values held (x_0, at most a plain value and a tape per stage, the gradient), the value
produced and the overhead, each rounded up by less than one unit, so the rounding adds
less than 2L + 5 units to any peak.

With unsaved outputs (``output_saved[i]`` false) the tape held, ``tape_size[i] -
x_size[i+1]``, is a value of its own: it is rounded up by itself and ``tape_size[i]``
becomes the rounded output plus the rounded held tape.  Rounding the two sizes apart
could make the held tape smaller than the real one (a tape of 1000 B around an output of
999 B, in units of 512 B: 1024 - 1024 = 0 held, against 1 B), and a schedule that fits
the rounded chain would not fit the real one.  Pure Python; no torch needed.
"""
from __future__ import annotations



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

    x = up(chain.x_size)
    held = up(chain.tape_held)
    tape = [t if saved else x[i + 1] + h for i, (t, h, saved) in
            enumerate(zip(up(chain.tape_size), held, chain.output_saved))]
    return chain.replace(x_size=x, tape_size=tape,
                         fwd_overhead=up(chain.fwd_overhead), bwd_overhead=up(chain.bwd_overhead),
                         fall_overhead=up(chain.fall_overhead))


