"""``remat confirm [--device cpu|cuda|auto] [--models ...] [--budgets ...] [--json]``

Profile the built-in networks, solve them at fractions of their store-all peak, execute the
schedules with autograd and report predicted vs measured peak activation memory and time
(see :mod:`remat_theory.lab.confirm`).  Needs torch.

``--offload`` gives each profiled chain a copy channel (its bandwidth measured, or
``--bandwidth``): the solvers that model it plan offloads, the others solve without it, and
schedules with transfers run on the offload executor.  On the CPU that is its correctness
mode: device peaks are compared, times of schedules with transfers are not meaningful.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

from remat_theory.model.errors import RematError
from remat_theory.cli.commands._common import (check_output_dir, default_output_dir, positive_float,
                                               positive_int, print_json, stdout_to_stderr,
                                               torch_device)
import solvers

NAME = "confirm"
ORDER = 60
HELP = "check predicted vs measured memory and time of schedules on real torch networks"


def _fractions(text: str) -> list:
    out = []
    for part in text.replace(",", " ").split():
        try:
            v = float(part[:-1]) / 100 if part.endswith("%") else float(part)
        except ValueError:
            raise RematError(f"--budgets: {part!r} is not a fraction (e.g. 0.5) or a percentage (50%)") from None
        if not 0 < v <= 1:
            raise RematError(f"--budgets: {part!r} must be a fraction of the store-all peak in (0, 1]")
        out.append(v)
    if not out:
        raise RematError("--budgets is empty")
    return out


def _names(text: str) -> list:
    return [p for p in text.replace(",", " ").split() if p]


def add_arguments(p) -> None:
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto (cuda when available); default cpu")
    p.add_argument("--models", default=None,
                   help="comma-separated networks (mlp, resnet, transformer, rnn; captured: "
                        "the families of remat profile --model); default the first four")
    p.add_argument("--budgets", default="0.3,0.5,0.8",
                   help="fractions (or percentages) of the store-all peak; default 0.3,0.5,0.8")
    p.add_argument("--solvers", default=None,
                   help="comma-separated solver names; default every registered solver")
    p.add_argument("--scale", default="small", choices=("test", "small", "large"), help="network sizes")
    p.add_argument("--repeats", type=positive_int, default=3, help="timed executions per schedule")
    p.add_argument("--profile-repeats", type=positive_int, default=5, dest="profile_repeats",
                   help="timed repetitions per stage when profiling")
    p.add_argument("--ilp-time-limit", type=positive_float, default=10.0, dest="ilp_time_limit",
                   help="seconds for each time-limited solver (ilp, exhaustive)")
    p.add_argument("--ilp-max-stages", type=positive_int, default=None, dest="ilp_max_stages",
                   help="skip the ILP on longer chains (default: the longest on which the "
                        "registry says it proves optima, `remat solvers`)")
    p.add_argument("--unit", type=positive_int, default=None,
                   help="solvers see sizes rounded up to multiples of this many bytes "
                        "(default: a power of two near store-all/2048)")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="torch CPU threads (default: torch's own choice)")
    p.add_argument("--clock", default="auto", choices=("auto", "wall", "process"),
                   help="CPU timing clock: wall, or process CPU time (immune to other load); auto = "
                        "process when torch uses one thread on the CPU, else wall")
    p.add_argument("--tolerance", type=positive_float, default=0.10,
                   help="memory tolerance |measured/predicted - 1| flagged in the table (default 0.10)")
    p.add_argument("--out", "--out-dir", default=None, dest="out_dir", metavar="DIR",
                   help="where confirm_<device>.json and .png are written (default: a new "
                        "folder remat-confirm-<device>-<date>-<time>-... under the system's "
                        "temporary folder, named in the output, so that nothing is written "
                        "into the repository or the current folder; '' to write nothing; "
                        "benchmarks/results to update the committed results)")
    p.add_argument("--deterministic", action="store_true",
                   help="use deterministic kernels only (torch.use_deterministic_algorithms), so that "
                        "gradients can match plain backprop bit for bit on a GPU too; an op that has "
                        "no deterministic kernel then stops the run with torch's error naming it")
    p.add_argument("--offload", action="store_true",
                   help="give the chains a copy channel (bandwidth measured on the device) and "
                        "run offload schedules (on the CPU: device peaks only, times are not "
                        "meaningful)")
    p.add_argument("--bandwidth", type=positive_float, default=None,
                   help="the copy channel's bytes per second (implies --offload; default: "
                        "measured)")
    p.add_argument("--json", action="store_true", help="print the records as a JSON list")


def _fmt(v, spec):
    return "-" if v is None else format(v, spec)


def print_table(records, tolerance: float) -> None:
    """One row per (model, budget, solver).  ratio = measured / predicted; "fits" says
    whether the measured peak is within the budget; then a summary of the peak ratios."""
    print(f"{'model':<12}{'solver':<14}{'budget':>7} {'status':<11}{'pred peak':>11}{'meas peak':>11}"
          f"{'ratio':>8}{'fits':>5}{'pred s':>9}{'meas s':>9}{'ratio':>7}  grads")
    for r in records:
        flag = ""
        if r["peak_ratio"] is not None and abs(r["peak_ratio"] - 1) > tolerance:
            flag = "  <-- memory outside tolerance"
        if r.get("within_budget") is False:
            flag += "  <-- over budget"
        grads = "-" if r["grads_identical"] is None else (
            "identical" if r["grads_identical"] else f"rel {r['max_grad_rel_error']:.1e}")
        status = r["status"]
        if status == "infeasible" and r["min_budget"] is not None:
            status += f" (min {r['min_budget'] / r['store_all_peak']:.0%})"
        fits = "-" if r.get("within_budget") is None else ("yes" if r["within_budget"] else "NO")
        print(f"{r['model']:<12}{r['solver']:<14}{r['budget_fraction']:>7.0%} {status:<11}"
              f"{_fmt(r['predicted_peak'], 'd'):>11}{_fmt(r['measured_peak'], 'd'):>11}"
              f"{_fmt(r['peak_ratio'], '.4f'):>8}{fits:>5}"
              f"{_fmt(r['predicted_time'], '.4f'):>9}"
              f"{_fmt(r['measured_time'], '.4f'):>9}"
              f"{_fmt(r['time_ratio'], '.2f') if r.get('time_meaningful', True) is not False else 'n/a':>7}"
              f"  {grads}{flag}")
    ran = [r for r in records if r["peak_ratio"] is not None]
    if any(r.get("time_meaningful") is False for r in ran):
        print("time ratio n/a: schedules with transfers ran in the CPU correctness mode "
              "(synchronous memcpy copies, nothing overlaps); their time says nothing about "
              "a copy channel; their device peak is measured")
    if ran:
        ratios = [r["peak_ratio"] for r in ran]
        over = sum(1 for r in ran if r.get("within_budget") is False)
        print(f"\n{len(ran)} schedules run: measured/predicted peak {min(ratios):.4f} to "
              f"{max(ratios):.4f}; {over} over budget as measured")
        for m in dict.fromkeys(r["model"] for r in ran):
            rs = [r for r in ran if r["model"] == m]
            print(f"  {m}: peak ratio {min(r['peak_ratio'] for r in rs):.4f} to "
                  f"{max(r['peak_ratio'] for r in rs):.4f}, parameter gradients "
                  f"{rs[0]['param_grad_bytes']} B outside the chain")


@contextlib.contextmanager
def deterministic_kernels(torch, on: bool):
    """Deterministic kernels inside the block (when ``on``), torch's settings restored after.

    On a GPU, cuDNN, cuBLAS and attention kernels may sum in a different order from one call
    to the next; the same stage backward then gives different bits in plain backprop and in a
    schedule, which says nothing about the schedule.  Strict, not ``warn_only``: with
    ``warn_only`` torch keeps e.g. the memory-efficient attention backward nondeterministic
    (it only warns), and the transformer's gradients differed from plain backprop by up to
    1.1e-6 relative on an H200; in strict mode that kernel switches to its deterministic
    variant.
    """
    if not on:
        yield
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # read when cuBLAS starts
    before = (torch.are_deterministic_algorithms_enabled(),
              torch.is_deterministic_algorithms_warn_only_enabled(), torch.backends.cudnn.benchmark)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.backends.cudnn.benchmark = before[2]


def _out_dir(given: str | None, device: str) -> Path:
    """The folder for the results: ``given`` (created if missing), or a new folder
    ``remat-confirm-<device>-<date>-<time>-...`` under the system's temporary folder."""
    if given is not None:
        out = Path(given)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RematError(f"--out {given!r}: cannot create it: {e.strerror or e}") from None
        return out
    return default_output_dir(f"confirm-{device}")


def run(args) -> int:
    if args.out_dir:
        check_output_dir(args.out_dir, "--out")
    # the arguments are checked before torch is imported (seconds)
    budgets = _fractions(args.budgets)
    models = _names(args.models) if args.models else None
    solver_names = _names(args.solvers) if args.solvers else None
    torch, device = torch_device(args.device, args.threads, "confirm")
    from remat_theory.lab import confirm as C

    clock = args.clock
    if clock == "auto":
        clock = "process" if device == "cpu" and torch.get_num_threads() == 1 else "wall"
    log = (lambda s: print(s, file=sys.stderr)) if args.json else print
    with stdout_to_stderr(args.json), deterministic_kernels(torch, args.deterministic):
        records = C.confirm(models, budgets, solver_names, device=device, scale=args.scale,
                            repeats=args.repeats, profile_repeats=args.profile_repeats,
                            ilp_time_limit=args.ilp_time_limit, clock=clock, unit=args.unit,
                            ilp_max_stages=args.ilp_max_stages or solvers.get("ilp").reference_max_stages,
                            log=log, offload=args.offload or args.bandwidth is not None,
                            bandwidth=args.bandwidth)
    for r in records:
        r["deterministic"] = args.deterministic
    if args.out_dir != "":
        out = _out_dir(args.out_dir, device)
        try:
            (out / f"confirm_{device}.json").write_text(json.dumps(records, indent=1) + "\n")
        except OSError as e:
            raise RematError(f"--out {str(out)!r}: cannot write: {e.strerror or e}") from None
        C.plot(records, out / f"confirm_{device}.png",
               title=f"remat confirm --device {device} (scale {args.scale})")
        print(f"remat confirm: wrote confirm_{device}.json and confirm_{device}.png in {out}",
              file=sys.stderr)
    if args.json:
        print_json(records)
    else:
        print()
        print_table(records, args.tolerance)
    bad = [r for r in records if r["grads_identical"] is False and r["max_grad_rel_error"] > 1e-6]
    if bad:
        print(f"remat: error: {len(bad)} schedule(s) gave gradients that differ from plain "
              f"backpropagation by more than 1e-6 relative", file=sys.stderr)
        return 1
    return 0
