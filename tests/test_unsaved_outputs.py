"""The optional ``output_saved`` field: a stage output that no backward reads.

The simulator is checked against a reference interpreter written here from the operation
table of docs/model.md with named values in a dict (no bitmasks, no shared code), on
random operation sequences, valid and invalid; the closed forms against the simulator.
"""
from __future__ import annotations

import json
import math

import pytest
from _tiers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from remat_theory import BudgetExceededError, Chain, ChainError, simulate
from remat_theory.analysis.families import FAMILIES, make, with_unsaved_outputs
from remat_theory.model.schedule import Schedule
from remat_theory.strategies import chains, valid_schedules
from solvers.store_all import store_all_schedule

# An MLP cut as Linear | ReLU | Linear: each Linear saves its input, not its output; the
# ReLU saves its output.  Sizes as a profile gives them (bytes).
MLP = dict(fwd_time=[1.0, 0.5, 1.0], bwd_time=[2.0, 0.5, 2.0, 0.1],
           x_size=[100, 100, 100, 10], tape_size=[100, 100, 10],
           output_saved=[False, True, False])


def test_absent_field_is_the_classic_table_and_round_trips():
    plain = Chain(**{k: v for k, v in MLP.items() if k != "output_saved"})
    assert plain.output_saved == (True, True, True) and not plain.has_unsaved_outputs
    assert plain.tape_held == plain.tape_size
    assert "output_saved" not in plain.to_dict()
    assert plain == Chain(**{**MLP, "output_saved": [True] * 3})
    c = Chain(**MLP)
    assert c.has_unsaved_outputs and c.tape_held == (0, 100, 0)
    assert c != plain
    again = Chain.from_json(c.to_json())
    assert again == c and json.loads(c.to_json())["output_saved"] == [False, True, False]


@pytest.mark.parametrize("value, message", [
    ([True, 1, True], r"output_saved\[1\] = 1 is not a boolean"),
    ([True, "no", True], r"output_saved\[1\] = 'no' is not a boolean"),
    ([True, False], r"output_saved has length 2, expected 3"),
    ("true", r"output_saved must be a list of booleans"),
])
def test_bad_output_saved_names_the_field(value, message):
    with pytest.raises(ChainError, match=message):
        Chain(**{**MLP, "output_saved": value})


def test_mlp_store_all_by_hand():
    """Store-all on Linear | ReLU | Linear, by hand: Fall0 adds x1 (plain, 100; its tape is
    empty); Fall1 adds t2 (100, the ReLU's output, x2 inside) and frees x1, nobody reads it;
    Fall2 adds x3 (10, plain).  Held: x0 + t2 + x3 = 210.  The peak is B1's: x0, t2, d2 and
    the new d1, 400 bytes; in the classic table x1 stays inside t1 and x3 inside t3 until
    their backwards, and B1 peaks at 500."""
    c = Chain(**MLP)
    r = simulate(c, store_all_schedule(c))
    after = {s.op: s.memory_after for s in r.profile}
    assert after["Fall0"] == 200 and after["Fall1"] == 200 and after["Fall2"] == 210
    assert after["Loss"] == 210  # d3 (10) in, the plain x3 (10) out
    assert after["B2"] == 100 + 100 + 100  # x0, t2, d2: B2 reads x2 inside t2
    assert r.peak_memory == c.store_all_memory() == 400
    classic = Chain(**{**MLP, "output_saved": [True] * 3})
    assert simulate(classic, store_all_schedule(classic)).peak_memory == 500


def test_unsaved_input_is_not_read_by_its_backward_nor_from_a_tape():
    c = Chain(**MLP)
    # Fall0 then Fn1 reads x1 (plain) and frees it: t1 is empty and cannot give x1 back
    with pytest.raises(Exception, match="x1 is not held"):
        simulate(c, "Fall0 Fn1 Fn1")
    # B1 needs no x1: a schedule that frees x1 before B1 is valid
    s = "Fall0 Fck1 Fall2 Loss B2 Fall1 B1 B0"
    assert simulate(c, s).makespan == pytest.approx(1 + 0.5 + 1 + 0.1 + 2 + 0.5 + 0.5 + 2)
    # a Fall recomputed after the next backward ran discards its unsaved output: after B1
    # of "Fck0 Fall1 Fall2 Loss B2 B1 Fall0 B0", x1 is not held (it would never be freed)
    r = simulate(c, "Fck0 Fall1 Fall2 Loss B2 B1 Fall0 B0")
    steps = {s.op: s for s in r.profile}
    assert steps["Fall0"].memory_after == steps["B1"].memory_after  # t1 is empty, x1 gone
    assert steps["Fall0"].peak == steps["B1"].memory_after + 100


class Reference:
    """The operation table with named values, written independently of the simulator."""

    def __init__(self, chain: Chain):
        self.c = chain
        self.held = {"x0": chain.x_size[0]}
        self.bwd_next = chain.length

    def saved(self, i):
        return i == 0 or self.c.output_saved[i - 1]

    def available(self, i):
        return f"x{i}" in self.held or (i >= 1 and self.saved(i) and f"t{i}" in self.held)

    def mem(self):
        return sum(self.held.values())

    def apply(self, token):
        """Apply one op; return its peak, or None when the op is invalid."""
        c, L = self.c, self.c.length
        kind = token.rstrip("0123456789")
        i = int(token[len(kind):]) if kind != "Loss" else L
        x = c.x_size
        if kind in ("Fn", "Fck", "Fall"):
            if i >= L or self.bwd_next < i or not self.available(i):
                return None
            if kind == "Fall":
                if f"t{i + 1}" in self.held:
                    return None
                peak = self.mem() + c.tape_size[i] + c.fall_overhead[i]
                out_inside = c.output_saved[i]
                self.held[f"t{i + 1}"] = c.tape_size[i] - (0 if out_inside else x[i + 1])
                if not out_inside and self.bwd_next >= i + 1:  # else nothing reads it
                    self.held.setdefault(f"x{i + 1}", x[i + 1])
                if i >= 1 and not self.saved(i):
                    del self.held[f"x{i}"]
                return peak
            if f"x{i + 1}" in self.held:
                return None
            peak = self.mem() + x[i + 1] + c.fwd_overhead[i]
            from_plain = f"x{i}" in self.held
            self.held[f"x{i + 1}"] = x[i + 1]
            if kind == "Fn" and i >= 1:
                del self.held[f"x{i}" if from_plain else f"t{i}"]
            return peak
        if kind == "Loss":
            if self.bwd_next != L or not self.available(L):
                return None
            peak = self.mem() + x[L] + c.bwd_overhead[L]
            self.held[f"d{L}"] = x[L]
            self.held.pop(f"x{L}", None)
            self.bwd_next = L - 1
            return peak
        # B_i
        if i >= L or self.bwd_next != i or f"t{i + 1}" not in self.held:
            return None
        if self.saved(i) and not self.available(i):
            return None
        peak = self.mem() + x[i] + c.bwd_overhead[i]
        self.held[f"d{i}"] = x[i]
        del self.held[f"d{i + 1}"], self.held[f"t{i + 1}"]
        if i >= 1:
            self.held.pop(f"x{i}", None)
        self.bwd_next = i - 1
        return peak


def _tokens(L):
    return [f"{k}{i}" for k in ("Fn", "Fck", "Fall", "B") for i in range(L)] + ["Loss"]


@settings(max_examples=examples(150, 16))
@given(st.data(), chains(1, 5, unsaved_outputs=True, fall_costs=None))
def test_simulator_agrees_with_the_reference_interpreter(data, chain):
    ref = Reference(chain)
    ops = []
    peak = chain.x_size[0]
    for _ in range(data.draw(st.integers(1, 25))):
        token = data.draw(st.sampled_from(_tokens(chain.length)))
        before = dict(ref.held), ref.bwd_next
        step_peak = ref.apply(token)
        if step_peak is None:  # the simulator must refuse it at this step too
            ref.held, ref.bwd_next = before
            with pytest.raises(Exception):
                simulate(chain, Schedule.parse(" ".join(ops + [token])))
            continue
        ops.append(token)
        peak = max(peak, step_peak)
        try:
            simulate(chain, Schedule.parse(" ".join(ops)))
        except Exception as e:  # only "ends without d0" is allowed
            assert "without computing d0" in str(e)
        profile = _profile(chain, ops)
        assert profile[-1].memory_after == ref.mem()
        assert max([chain.x_size[0]] + [s.peak for s in profile]) == peak


def _profile(chain, ops):
    """The simulator's profile of a prefix (which need not end with d0)."""
    from remat_theory.model.schedule import Schedule as S
    from remat_theory.model.simulator import State, transition
    state, mem, out = State.initial(chain), chain.x_size[0], []
    for op in S.parse(" ".join(ops)):
        r = transition(chain, state, mem, op)
        assert not isinstance(r, str), r
        out.append(r)
        state, mem = r.state, r.memory_after
    return out


@settings(max_examples=examples(120, 24))
@given(chains(1, 7, unsaved_outputs=None, fall_costs=None))
def test_store_all_closed_form(chain):
    """Chain.store_all_memory and ideal_makespan against the simulator, on chains with and
    without each optional field (recording costs, unsaved outputs)."""
    s = store_all_schedule(chain)
    peak = chain.store_all_memory()
    r = simulate(chain, s, peak)
    assert r.peak_memory == peak
    assert math.isclose(r.makespan, chain.ideal_makespan(), rel_tol=1e-12)
    with pytest.raises(BudgetExceededError):
        simulate(chain, s, peak - 1)


@settings(max_examples=examples(120, 20))
@given(st.data(), chains(1, 5, unsaved_outputs=None, fall_costs=None))
def test_no_valid_schedule_goes_below_the_lower_bound(data, chain):
    """Lemmas 1.4 and 1.6 (1.11, 1.12): no valid schedule beats the ideal makespan or goes
    below the memory lower bound, with and without each optional field."""
    s = data.draw(valid_schedules(chain))
    assert simulate(chain, s).peak_memory >= chain.memory_lower_bound()
    assert simulate(chain, s).makespan >= chain.ideal_makespan() - 1e-9


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_unsaved_outputs_are_seeded_and_valid(family):
    base = make(family, 8, seed=2)
    a, b = with_unsaved_outputs(base, 5), with_unsaved_outputs(base, 5)
    assert a == b and a.has_unsaved_outputs
    assert a.store_all_memory() <= base.store_all_memory()
    assert simulate(a, store_all_schedule(a)).peak_memory == a.store_all_memory()


@settings(max_examples=examples(120, 22))
@given(st.data(), chains(1, 8, unsaved_outputs=None, fall_costs=None))
def test_segments_closed_form(data, chain):
    """The segment baselines' closed form against the simulator, with and without each
    optional field."""
    from solvers._schedules import segments_cost, segments_schedule

    cps = sorted(data.draw(st.sets(st.integers(1, chain.length - 1), max_size=chain.length))) \
        if chain.length > 1 else []
    makespan, peak = segments_cost(chain, cps)
    r = simulate(chain, segments_schedule(chain, cps))
    assert peak == r.peak_memory and math.isclose(makespan, r.makespan, rel_tol=1e-12)


BASELINES = ["store-all", "recompute-all", "periodic", "chen-sqrt", "chen-greedy", "revolve",
             "gruslys", "dtr"]


@pytest.mark.parametrize("name", BASELINES)
@settings(max_examples=25)
@given(st.data(), chains(2, 7, unsaved_outputs=True, fall_costs=None))
def test_baselines_replay_on_unsaved_outputs(name, data, chain):
    """Every baseline's schedule is valid and its claims are the simulator's
    (``solvers.solve`` replays it and raises SolverContractError on any disagreement)."""
    import solvers

    lo, hi = chain.memory_lower_bound(), chain.store_all_memory()
    budget = data.draw(st.integers(lo, hi))
    sol = solvers.solve(chain, budget, name)
    if sol.schedule is not None:
        r = simulate(chain, sol.schedule, budget, allow_drop=True)
        assert math.isclose(r.makespan, sol.makespan, rel_tol=1e-9)
        assert r.peak_memory == sol.peak_memory <= budget
    else:
        assert sol.min_budget is None or sol.min_budget > budget
