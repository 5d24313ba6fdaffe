"""The proof benchmark's chains of the package's own families at their published depth
(benchmarks/bench_prove_depth.py ``--preset``): the realsize profile, rounded as the
module says, and one instance carried end to end (prove, certificate, independent check)."""
import argparse

import _bench
import pytest

pytest.importorskip("torch")

from remat_theory.torch.realsize.chain import real_size_profile  # noqa: E402
from remat_theory.torch.realsize.devices import device_named  # noqa: E402
from remat_theory.torch.realsize.planner import timed  # noqa: E402
from remat_theory.torch.realsize.presets import spec_of  # noqa: E402


@pytest.fixture(scope="module")
def bench():
    return _bench.load("bench_prove_depth")


def test_a_preset_chain_is_its_profile_rounded(bench):
    chain = bench.preset_chain("llama-2-7b")
    prof = timed(real_size_profile(spec_of("llama-2-7b"), 1, 2048),
                 device_named(bench.PRESET_DEVICE)).chain
    assert chain.length == prof.length == 32  # one stage per layer
    unit = min(prof.x_size) // 2
    assert list(chain.fwd_time) == [float(round(t * 1e6)) for t in prof.fwd_time]
    assert list(chain.bwd_time) == [float(round(t * 1e6)) for t in prof.bwd_time]
    assert list(chain.x_size) == [-(-v // unit) for v in prof.x_size]
    for i, t in enumerate(chain.tape_size):  # rounded up, and never below its output
        assert t == max(-(-prof.tape_size[i] // unit), chain.x_size[i + 1])
        assert t * unit >= prof.tape_size[i]


def test_a_preset_instance_runs_end_to_end_with_a_checked_certificate(bench, tmp_path):
    args = argparse.Namespace(random=[], net=[], preset=["llama-2-7b"], seeds=1,
                              first_seed=0, time_limit=60.0, cert_dir=str(tmp_path),
                              only=["llama-2-7b:4"], lagrange=None, lagrange_window=None)
    (row,) = bench.run(args)
    assert row["budget_index"] == 4 and row["stages"] == 32
    assert row["status"] == "optimal" and row["gap"] == 0
    assert row["accepted"], row["checker"]  # proofs/check_certificate.py, its own process
