"""Chapter 09 part 1: the allocator's bytes equal the byte model; precision and checkpointing
experiments say what the chapter claims; bad input gets one line."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from hpclab import experiments
from hpclab.memory import model as bm


def test_the_byte_model_per_parameter_is_the_published_table():
    assert bm.bytes_per_param("adam", "mixed") == 16  # Rajbhandari et al. 2020
    assert bm.bytes_per_param("adam", "fp32") == 16
    assert bm.bytes_per_param("sgd-momentum", "fp32") == 12
    assert bm.bytes_per_param("sgd", "mixed") == 8
    assert bm.bytes_per_param("adamw", "autocast") == 18  # fp32 weights + half copies
    with pytest.raises(ValueError, match=r"precision='fp8' is not known; allowed: fp32, mixed"):
        bm.bytes_per_param("adam", "fp8")
    m = bm.MLP(in_features=64, width=32, depth=3, batch=8)
    assert m.params == (64 * 32 + 32) + (32 * 32 + 32) + (32 * 10 + 10)
    assert bm.parts(m)["activations"] == 4 * 8 * (32 + 32 + 10)
    # one segment: its input is the batch itself; the loss's output and one generator state
    assert bm.checkpointed_activations(m, 3) == 4 * 8 * 10 + bm.rng_state_bytes()


@pytest.mark.parametrize("optimizer, dtype", [("adam", "fp32"), ("sgd-momentum", "bf16")])
def test_measured_parts_and_peak_are_within_ten_percent_of_the_model(optimizer, dtype):
    res = experiments.run("memory-anatomy", widths=(32, 96), depth=4, batch_size=32, side=8,
                          optimizer=optimizer, dtype=dtype)  # fmt: skip
    assert len(res.records) == 2 * 5
    for r in res.records:
        if r["model_bytes"] == 0:
            assert abs(r["measured_bytes"]) < 1024, r
        else:
            assert r["measured_bytes"] == pytest.approx(r["model_bytes"], rel=0.1), r
    by = {(r["width"], r["part"]): r["measured_bytes"] for r in res.records}
    assert by[96, "params"] > 2 * by[32, "params"]  # a bigger model, measured bigger
    states = {"adam": 2, "sgd-momentum": 1}[optimizer]
    assert by[96, "optimizer"] == pytest.approx(states * by[96, "params"], abs=256)
    assert len(experiments.get("memory-anatomy").plot(res).data) == 6


def test_fp16_zeroes_small_gradients_that_loss_scaling_and_bf16_keep():
    res = experiments.run("precision", depth=16, width=32, side=8, batch_size=32, steps=4)
    s = {r["dtype"]: r for r in res.records if r["kind"] == "summary"}
    fp32 = s["fp32"]["grad_zero_fraction"]
    assert s["fp16"]["grad_zero_fraction"] > fp32 + 0.05  # underflow below 2**-24
    assert s["fp16"]["grad_zero_fraction_scaled"] == pytest.approx(fp32, abs=0.01)
    assert s["bf16"]["grad_zero_fraction"] == pytest.approx(fp32, abs=0.01)  # fp32's range
    assert s["fp16"]["loss_scale"] > 1 and s["fp32"]["loss_scale"] == s["bf16"]["loss_scale"] == 1
    for r in s.values():
        assert math.isfinite(r["final_loss"]) and r["peak_bytes"] > 0 and r["step_s"] > 0
        assert r["final_loss"] == pytest.approx(s["fp32"]["final_loss"], abs=0.05)
    curves = [r for r in res.records if r["kind"] == "curve"]
    assert len(curves) == 3 * 4
    hist = [r for r in res.records if r["kind"] == "histogram"]
    assert sum(r["count"] for r in hist) == sum(
        p.numel() for p in __import__("hpclab.train").train.make_model("deep", 64, depth=16,
                                                                        width=32).parameters()
    )  # fmt: skip


def test_checkpointing_in_segments_keeps_fewer_activations_as_the_model_says():
    res = experiments.run("checkpointing", depth=8, width=32, batch_size=256, side=8,
                          every=(1, 4), steps=3)  # fmt: skip
    by = {r["policy"]: r for r in res.records}
    assert list(by) == ["none", "every block", "every 4 blocks"]
    for r in res.records:
        assert r["activation_bytes"] == pytest.approx(r["model_activation_bytes"], rel=0.1), r
        assert r["peak_bytes"] == pytest.approx(r["model_peak_bytes"], rel=0.1), r
    # an MLP block keeps only its input: checkpointing every block saves nothing here;
    # segments of 4 keep 2 of the 8 block inputs
    assert by["every block"]["activation_bytes"] > 0.9 * by["none"]["activation_bytes"]
    assert by["every 4 blocks"]["activation_bytes"] < 0.4 * by["none"]["activation_bytes"]


def _cli(*args):
    env = {**os.environ, "HPCLAB_QUICK": "1"}
    return subprocess.run([sys.executable, "-m", "hpclab.cli", *args], capture_output=True,
                          text=True, timeout=120, env=env)  # fmt: skip


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("precision", "--dtypes", "fp32,fp8"), "dtypes='fp8' is not allowed; allowed: one of"),
        (("checkpointing", "--depth", "4", "--every", "6"), "every=6 is larger than depth=4"),
    ],
)
def test_bad_input_gets_one_line(args, fragment):
    out = _cli("run", *args)
    assert out.returncode == 2 and fragment in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_the_cli_prints_records_with_the_named_fields():
    out = _cli("run", "checkpointing", "--depth", "4", "--width", "16", "--batch-size", "64",
               "--side", "8", "--every", "2", "--steps", "3", "--json")  # fmt: skip
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["records"]
    assert {"policy", "activation_bytes", "step_s"} <= set(rows[0])


def test_k_micro_batches_equal_one_batch_with_one_allreduce_per_step():
    res = experiments.run("accumulation", ranks=2, micro_batches=(1, 4), batch_size=32, steps=3)
    by = {r["micro_batches"]: r for r in res.records}
    assert by[4]["max_diff_vs_one_batch"] <= by[4]["tolerance"]
    assert by[1]["allreduces_per_step"] == by[4]["allreduces_per_step"] == 1  # not 4
    # one micro-batch's activations: a quarter of the batch's (the allocator's count)
    assert by[4]["activation_bytes"] == pytest.approx(by[1]["activation_bytes"] / 4, rel=0.02)


def test_the_published_figures_are_bundled_with_their_sources():
    from hpclab.memory import published

    rows = published()
    assert all(r["tier"] == "reference" and len(r["source"]) > 40 for r in rows)
    by = {r["figure"]: r for r in rows}
    assert by["bytes per parameter, mixed-precision Adam"]["value"] == bm.bytes_per_param(
        "adam", "mixed"
    )
    assert by["fp16 smallest subnormal (2**-24)"]["value"] == 2.0**-24
