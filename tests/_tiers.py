"""The test tiers (docs/testing.md).

``python -m pytest -q`` (the default tier) checks every relation on small instances and
must stay cheap; ``-m slow`` holds the sweeps, every network and the long chains. A
property test's example count is written ``examples(full, small)``: the default tier runs
``small`` examples, ``REMAT_FULL_EXAMPLES=1`` runs ``full`` (the count it had before the
tiers). A per-network (or per-chain, per-seed) test names its values with
``tiered(values, default)``: the values not in ``default`` run under ``slow``.
"""
from __future__ import annotations

import os

import pytest

FULL_EXAMPLES = os.environ.get("REMAT_FULL_EXAMPLES", "") not in ("", "0")


def examples(full: int, small: int) -> int:
    """Hypothesis's ``max_examples``: ``small`` by default, ``full`` with REMAT_FULL_EXAMPLES=1."""
    if not 1 <= small <= full:
        raise ValueError(f"examples: small={small} must be in 1..full={full}")
    return full if FULL_EXAMPLES else small


# the same rule for a fixed sample (seeded random chains drawn in a loop)
instances = examples


def tiered(values, default):
    """``values`` as pytest parameters, those not in ``default`` marked ``slow`` (a tuple is
    the arguments of one parameter set)."""
    values, default = list(values), list(default)
    missing = [d for d in default if d not in values]
    if missing:
        raise ValueError(f"tiered: default values {missing} are not among the parameters")
    return [v if v in default else
            pytest.param(*(v if isinstance(v, tuple) else (v,)), marks=pytest.mark.slow)
            for v in values]
