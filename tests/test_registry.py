"""The solver interface: registry, Solution, verification by replay, store-all."""
import numpy as np
import pytest
from _tiers import examples
from hypothesis import given, settings

import solvers
from remat_theory import Chain, Schedule, Solution, SolverError
from remat_theory.model import classes
from remat_theory.model.errors import RematError, SolverContractError, SolverOptionError
from remat_theory.model.solution import FEASIBLE, INFEASIBLE, OPTIMAL, TIME_LIMIT
from remat_theory.model.validation import check_bool, check_choice, check_int, check_positive
from solvers import registry
from remat_theory.strategies import chains
from solvers.registry import _REGISTRY, register
from solvers.store_all import store_all_schedule

C2 = Chain(fwd_time=[1, 2], bwd_time=[3, 4, 0.5], x_size=[4, 2, 3], tape_size=[5, 6],
           fwd_overhead=[1, 2], bwd_overhead=[1, 0, 2])


def test_registry_lists_store_all_and_exhaustive():
    names = solvers.names()
    assert "store-all" in names and "exhaustive" in names
    assert solvers.get("exhaustive").exact and not solvers.get("store-all").exact


def test_unknown_solver_and_option_are_named():
    with pytest.raises(SolverError, match="unknown solver 'nope'"):
        solvers.solve(C2, 20, "nope")
    with pytest.raises(SolverError, match="solver 'store-all' does not take option 'slots'"):
        solvers.solve(C2, 20, "store-all", slots=10)
    with pytest.raises(RematError, match="budget = -3 is negative"):
        solvers.solve(C2, -3, "store-all")
    with pytest.raises(RematError, match="chain must be a Chain"):
        solvers.solve("chain.json", 3, "store-all")


def test_store_all_solution():
    sol = solvers.solve(C2, 20, "store-all")
    assert sol.status == OPTIMAL and sol.makespan == 10.5 and sol.peak_memory == 20
    assert sol.schedule.tokens() == ["Fall0", "Fall1", "Loss", "B1", "B0"]
    assert sol.wall_time > 0 and sol.bound == sol.makespan
    d = sol.to_dict()
    assert d["schedule"] == sol.schedule.tokens() and d["status"] == "optimal"
    sol = solvers.solve(C2, 19, "store-all")
    assert sol.status == INFEASIBLE and sol.schedule is None and sol.min_budget == 20


@settings(max_examples=examples(50, 26))
@given(chains(1, 8))
def test_store_all_matches_simulator(chain):
    sol = solvers.solve(chain, chain.store_all_memory(), "store-all")
    assert sol.schedule == store_all_schedule(chain)
    assert sol.makespan == pytest.approx(chain.ideal_makespan())


def _liar(chain, budget):
    # Claims the ideal makespan for a schedule that recomputes.
    s = Schedule.parse("Fck0 Fn1 Loss Fck0 Fall1 B1 Fall0 B0")
    return Solution("liar", FEASIBLE, s, 10.5, 17, budget)


def _wrong_peak(chain, budget):
    s = Schedule.parse("Fall0 Fall1 Loss B1 B0")
    return Solution("wrong-peak", FEASIBLE, s, 10.5, 19, budget)


def _invalid(chain, budget):
    return Solution("invalid", FEASIBLE, Schedule.parse("Fall0 Loss B1 B0"), 1.0, 1, budget)


@pytest.mark.parametrize("func, message", [
    (_liar, "claims makespan 10.5 but the simulator measures 14.5"),
    (_wrong_peak, "claims peak 19 but the simulator measures 20"),
    (_invalid, "returned an invalid schedule: step 1 (Loss)"),
])
def test_registry_catches_lying_solvers(func, message):
    name = func.__name__
    register(name, optimal_for="none")(func)
    try:
        # a false answer: the solver's bug, not a SolverError (misuse or a limit) nor bad input
        with pytest.raises(SolverContractError,
                           match=message.replace("(", r"\(").replace(")", r"\)")) as e:
            solvers.solve(C2, 100, name)
        assert not isinstance(e.value, RematError)
    finally:
        del _REGISTRY[name]


def test_solution_rejects_unknown_status():
    with pytest.raises(ValueError, match="status = 'great'"):
        Solution("x", "great", None, None, None, 1)


def test_reserved_option_names_are_refused():
    def clashing(chain, budget, *, solver="x"):
        raise AssertionError("never called")

    with pytest.raises(SolverError, match="option name 'solver' is reserved"):
        register("clashing", optimal_for="none")(clashing)
    assert "clashing" not in _REGISTRY


# ------------------------------------------------------------ named constructors, errors
def test_named_constructors_say_what_each_status_needs():
    s = store_all_schedule(C2)
    opt = Solution.optimal("x", 20, s, 10.5, 20, optimal_for="all")
    assert (opt.status, opt.bound, opt.optimal_for, opt.allows_drop) == (OPTIMAL, 10.5, "all", False)
    feas = Solution.feasible("x", 20, s, 10.5, 20)
    assert feas.status == FEASIBLE and feas.optimal_for == "none" and feas.bound is None
    inf = Solution.infeasible("x", 19, min_budget=20, optimal_for="persistent", message="m")
    assert (inf.status, inf.schedule, inf.makespan, inf.min_budget) == (INFEASIBLE, None, None, 20)
    tl = Solution.time_limit("x", 19, bound=3.0, optimal_for="all",
                             message="time limit reached: not proven optimal")
    assert tl.status == TIME_LIMIT and tl.schedule is None and tl.bound == 3.0
    # the positional form is the same record
    assert inf == Solution("x", INFEASIBLE, None, None, None, 19, optimal_for="persistent",
                           min_budget=20, message="m")
    # Drop is a typed field; the older info spelling still sets it, and the JSON says it
    assert Solution.feasible("x", 20, s, 10.5, 20, info={"allow_drop": True}).allows_drop
    assert opt.to_dict()["allows_drop"] is False


def test_misuse_and_false_answers_are_different_errors():
    with pytest.raises(SolverOptionError):
        solvers.solve(C2, 20, "nope")
    with pytest.raises(SolverOptionError, match="max_states = 0 must be >= 1"):
        solvers.solve(C2, 20, "exhaustive", max_states=0)
    register("_liar", optimal_for="none")(_liar)
    try:
        with pytest.raises(SolverContractError):
            solvers.solve(C2, 100, "_liar")
    finally:
        del _REGISTRY["_liar"]


def test_a_variant_label_runs_its_solver_with_its_options():
    v = registry.variants()["exhaustive-persistent"]
    assert v.solver == "exhaustive" and v.option_dict == {"schedule_class": "persistent"}
    by_label = solvers.solve(C2, 17, "exhaustive-persistent")
    direct = solvers.solve(C2, 17, "exhaustive", schedule_class="persistent")
    assert by_label.makespan == direct.makespan and by_label.optimal_for == "persistent"
    # explicit options override the variant's
    assert solvers.solve(C2, 17, "exhaustive-persistent", schedule_class="all").optimal_for == "all"


@pytest.mark.parametrize("check, args, message", [
    (check_int, (2.5, "n"), "n = 2.5 is not an integer"),
    (check_int, (True, "n"), "n = True is not an integer"),
    (check_int, (0, "n"), "n = 0 must be >= 1"),
    (check_bool, (1, "flag"), "flag = 1 must be True or False"),
    (check_positive, (0.0, "time_limit"), "time_limit = 0.0 must be a positive number"),
    (check_choice, ("both", "variant", ("a", "b")), "variant = 'both' is not one of a, b"),
])
def test_validation_helpers_name_the_field_and_value(check, args, message):
    kwargs = {"minimum": 1} if check is check_int else {}
    with pytest.raises(SolverOptionError, match=message.replace("(", r"\(")):
        check(*args, error=SolverOptionError, **kwargs)
    assert check_int(np.int64(3), "n", minimum=1) == 3 and isinstance(check_int(np.int64(3), "n"), int)


def test_one_vocabulary_of_schedule_classes():
    # the option spelling and the serialized spelling are one class
    assert classes.schedule_class("weak") is classes.schedule_class("weakly-persistent")
    assert classes.schedule_class("monotone") is classes.MONOTONE and classes.MONOTONE.key == "weak-runs<=1"
    order = [c.key for c in classes.RANKED]
    assert order == ["persistent", "weakly-persistent", "weak-runs<=1", "weak-runs<=2", "all", "all+drop"]
    assert classes.subset("weak-runs<=2", "weak-runs<=7") and not classes.subset("all", "weak-runs<=7")
    assert not classes.subset("run+falls", "all") and classes.subset("none", "none")
    with pytest.raises(RematError, match="schedule class 'weakish' is unknown"):
        classes.schedule_class("weakish")
    # membership is decided by the rules, whatever the solver said
    s = store_all_schedule(C2)
    assert classes.classify(C2, s) is classes.PERSISTENT
    assert Solution.optimal("x", 20, s, 10.5, 20, optimal_for=classes.WEAK).optimal_for == "weakly-persistent"


def test_solver_facts_are_read_from_the_registry(capsys):
    import json

    from remat_theory.cli import main

    ex = solvers.get("exhaustive")
    assert ex.max_stages < ex.defaults["max_stages"] < ex.reference_max_stages and ex.may_drop
    long = Chain.homogeneous(ex.reference_max_stages + 1)
    assert "4^L" in registry.note(long, None, "exhaustive", {"max_stages": long.length}).text
    assert registry.note(long, None, "exhaustive", {"time_limit": 5}) is None
    assert registry.note(C2, None, "exhaustive") is None
    assert main(["solvers", "--json"]) == 0
    listed = {d["name"]: d for d in json.loads(capsys.readouterr().out)}
    assert listed["exhaustive"]["reference_max_stages"] == ex.reference_max_stages
    assert listed["exhaustive"]["variants"]["exhaustive-weak"] == {"schedule_class": "weak"}
    assert listed["dtr"]["may_drop"] and not listed["dp"]["may_drop"]


def _store_all_plain(chain, budget):
    from solvers.store_all import solve_store_all
    return solve_store_all(chain, budget)


@pytest.mark.parametrize("name", ["fall-costs", "unsaved-outputs"])
def test_a_solver_is_refused_on_a_field_it_does_not_model(name):
    """``supports`` says which optional fields a solver models; a chain using another is
    refused before the solver runs, naming the field and the solvers that model it."""
    from remat_theory.analysis import families

    chain = families.with_variations(families.make("random", 3, 1), [name], 2)
    field = chain.fields_used()[0]
    with registry.registered("_classic", _store_all_plain, optimal_for="none"):
        assert solvers.solve(C2, 20, "_classic").success  # a plain chain: it runs
        with pytest.raises(SolverOptionError, match=f"does not model the chain field {field}"
                           r".*solvers that model .*\bdp\b"):
            solvers.solve(chain, chain.store_all_memory(), "_classic")
        assert registry.unsupported("_classic", chain) == chain.fields_used()
        assert not registry.models("_classic", name)
    others = [f for f in chain.fields_used()]
    with registry.registered("_some", _store_all_plain, optimal_for="none", supports=others):
        assert solvers.solve(chain, chain.store_all_memory(), "_some").success
        assert registry.models("_some", name)


def test_supports_and_the_option_schema_are_checked_at_registration():
    from solvers.registry import Option

    def f(chain, budget, *, k: int = 1):
        return None

    with pytest.raises(SolverError, match="'copy_rate', which is not an optional chain field"):
        register("_bad", optimal_for="none", supports=("copy_rate",))(f)
    with pytest.raises(SolverError, match="the option schema names 'j'"):
        register("_bad", optimal_for="none", options={"j": Option("int", "j")})(f)
    with pytest.raises(SolverError, match="variant '_bad-0'.*k = 0 must be >= 1"):
        register("_bad", optimal_for="none", options={"k": Option("int", "k", minimum=1)},
                 variants={"_bad-0": {"k": 0}})(f)
    assert "_bad" not in _REGISTRY


@pytest.mark.parametrize("label, options, message", [
    ("dp", {"slots": 0}, "solver 'dp': option slots = 0 must be >= 1"),
    ("dp", {"slots": 2.5}, "slots = 2.5 is not an integer"),
    ("dp", {"time_limit": -1}, "time_limit = -1 must be a positive number of seconds"),
    ("dp-weak", {"time_limit": True}, "time_limit = True must be a positive number"),
    ("dp", {"slot_bound": 1}, "slot_bound = 1 must be True or False"),
    ("exhaustive", {"max_states": 0}, "max_states = 0 must be >= 1"),
    ("exhaustive", {"time_limit": float("nan")}, "time_limit = nan must be a positive"),
    ("prove", {"relaxation_share": 1.5}, r"relaxation_share = 1.5 must be a number in \(0, 1\]"),
    ("auto", {"time_limit": 0}, "solver 'auto': option time_limit = 0 must be a positive"),
    ("gruslys", {"variant": "both"}, "variant = 'both' is not one of hidden, internal, mixed"),
    ("periodic", {"segments": 9}, "segments = 9 must be <= 2"),
    ("revolve", {"slots": 0}, "slots = 0 must be >= 1"),
    ("chen-greedy", {"b": -1}, "b = -1 must be a finite number >= 0"),
    ("chen-greedy", {"grid": None}, "grid = None is not allowed: it must be an integer >= 1"),
    ("dp-slots", {"slots": 0}, "slots = 0 must be >= 1"),  # a variant's solver's schema
])
def test_options_are_checked_by_the_schema_before_the_solver_runs(label, options, message):
    with pytest.raises(SolverOptionError, match=message):
        solvers.solve(C2, 20, label, **options)


def test_every_option_of_a_built_in_solver_has_a_schema():
    import numpy as np

    for name in solvers.names():
        info = solvers.get(name)
        assert set(info.schema) == set(info.options), name
        for line, option in zip(info.option_help(), info.options):
            assert line.startswith(f"{option}: ") and "(default " in line, line
    # values are normalised: numpy numbers become plain Python ones
    sol = solvers.solve(C2, 20, "dp", slots=np.int64(40), time_limit=np.float64(9))
    assert sol.schedule is not None and type(sol.info["slots"]) is int


def test_each_builtin_name_is_registered_by_the_module_the_table_names():
    """get() imports only the module BUILTIN_MODULES names for a built-in solver or variant:
    in a fresh interpreter each name is then found, and its solver is that module's."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    script = (
        "import json, sys\n"
        "from solvers import registry\n"
        "out = {}\n"
        "for name, mod in registry.BUILTIN_MODULES.items():\n"
        "    info = registry.get(name)\n"
        "    out[name] = [info.func.__module__, registry._LOADED]\n"
        "print(json.dumps(out))\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       env={"PYTHONPATH": str(root), "PATH": ""}, timeout=120)
    assert r.returncode == 0, r.stderr
    found = json.loads(r.stdout)
    from solvers import registry

    for name, mod in registry.BUILTIN_MODULES.items():
        module, loaded_all = found[name]
        assert module == f"solvers.{mod}", name
        assert not loaded_all, f"{name}: every solver module was imported"
