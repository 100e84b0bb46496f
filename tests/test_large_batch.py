"""Chapter 06's time to accuracy as experiments: ``ddp --target-acc`` and ``large-batch``
(records, the bend's fit, a run that never gets there, bad input in one line).
Cost: about 15 s on 2 quiet cores (quick-mode task: 20 000 samples)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hpclab.ddp.large_batch import fit_bend
from hpclab.experiments import run


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HPCLAB_QUICK": "1"}
    return subprocess.run([sys.executable, "-m", "hpclab.cli", "run", *args],
                          capture_output=True, text=True, timeout=120, env=env)  # fmt: skip


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("ddp", "--target-acc", "1.5"), "target_acc=1.5"),
        (("ddp", "--target-acc", "0.6", "--warmup-epochs", "5", "--max-epochs", "2"),
         "warmup_epochs=5 is longer than the run"),
        (("large-batch", "--warmup-epochs", "3", "--max-epochs", "2"),
         "warmup_epochs=3 is longer than the run"),
        (("large-batch", "--target-acc", "2"), "target_acc=2"),
        (("large-batch", "--min-batch", "512", "--max-batch", "64"), "min_batch=512 > max_batch"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line(args, words):
    out = _cli(*args)
    assert out.returncode == 2
    assert words in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_the_bend_fit_recovers_a_known_curve():
    s_min, b_crit = 50.0, 300.0
    got = fit_bend({b: round(s_min * (1 + b_crit / b)) for b in (32, 128, 512, 2048)})
    assert got == pytest.approx((s_min, b_crit), rel=0.02)
    assert fit_bend({64: 100}) is None
    assert fit_bend({64: 100, 256: 120}) is None  # no bend: more steps at a larger batch


def test_ddp_to_a_target_adds_steps_time_and_core_hours():
    res = run("ddp", ranks=2, batch_size=64, target_acc=0.58, lr=0.2, device="cpu")
    one, two, model = res.records
    assert one["ranks"] == 1 and two["ranks"] == 2 and model["tier"] == "model"
    assert one["reached"] and two["reached"]
    # weak scaling, no LR rule: the global batch doubles, so the target takes fewer steps
    assert two["steps_to_target"] < one["steps_to_target"]
    assert two["core_hours"] == pytest.approx(
        2 * two["threads_per_rank"] * two["time_to_target_s"] / 3600
    )
    assert model["time_to_target_s"] == pytest.approx(two["steps_to_target"] * model["step_s"])


def test_a_ddp_run_that_never_reaches_the_target_says_so():
    res = run("ddp", ranks=1, batch_size=64, target_acc=0.99, max_epochs=0.2, device="cpu")
    (rec,) = res.records
    assert rec["reached"] is False and rec["time_to_target_s"] is None
    assert rec["note"].startswith("never reached 0.99 in 62 steps (0.199 epochs); best")


def test_large_batch_sweeps_rules_from_a_tuned_base_rate():
    res = run("large-batch", min_batch=64, max_batch=256, rules="linear", target_acc=0.58,
              device="cpu")  # fmt: skip
    tune = [r for r in res.records if r.get("role") == "tune"]
    sweep = {r["global_batch"]: r for r in res.records if r.get("role") == "sweep"}
    fit = next(r for r in res.records if r.get("role") == "fit")
    assert [r["base_lr"] for r in tune] == [0.1, 0.2]  # quick mode's two base rates
    best = min((r for r in tune if r["reached"]), key=lambda r: r["steps_to_target"])
    assert sweep[64]["base_lr"] == best["base_lr"]  # the sweep starts from the tuned rate
    assert sweep[64]["steps_to_target"] == best["steps_to_target"]  # same seed, same run
    assert sweep[256]["lr"] == pytest.approx(4 * best["base_lr"])  # the linear rule
    assert sweep[256]["steps_to_target"] < sweep[64]["steps_to_target"]
    assert fit["b_simple"] > 0  # the noise scale, measured in the base run
    assert {r["source"] for r in res.records if r["tier"] == "reference"} >= {
        "Goyal et al. 2017", "McCandlish et al. 2018"}  # fmt: skip
