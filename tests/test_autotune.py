"""Chapter 08: the autotuner prunes by the machine's facts and the student's wishes, then measures."""

from __future__ import annotations

import pytest

from hpclab.config import ConfigError
from hpclab.progress import Progress
from hpclab.search.autotune import AutotuneConfig, prune, run_autotune

MACHINE = {
    "cores_usable": 4,
    "cores_node": 8,
    "simd": ["avx2"],
    "mem_available_gb": 16.0,
    "gpus": [],
}


def reasons(cfg, info=MACHINE):
    return {
        (c["threads"], c["batch"], c["dtype"], c["memory_format"]): why
        for c, why in prune(cfg, info)
    }


def test_hard_constraints_come_from_the_machine():
    cfg = AutotuneConfig.create(batches=(32,), formats=("contiguous",))
    r = reasons(cfg)
    assert {t for t, *_ in r} == {1, 2, 4, 8}  # powers of two up to the node, and the node
    assert r[(8, 32, "fp32", "contiguous")].startswith("hard: threads > 4")
    assert r[(4, 32, "bf16", "contiguous")] == "hard: no native bf16 on this CPU"
    assert r[(4, 32, "fp32", "contiguous")] == ""
    with_bf16 = reasons(cfg, dict(MACHINE, simd=["avx512_bf16"]))
    assert with_bf16[(4, 32, "bf16", "contiguous")] == ""
    tiny_memory = reasons(
        AutotuneConfig.create(batches=(65536,), side=128), dict(MACHINE, mem_available_gb=1)
    )
    assert all(
        w.startswith("hard: activations")
        for (t, *_), w in tiny_memory.items()
        if t <= 4 and _[1] == "fp32"
    )


def test_soft_constraints_come_from_the_student():
    cfg = AutotuneConfig.create(
        batches=(32, 512), dtypes=("fp32",), max_batch=256, formats=("contiguous",)
    )
    r = reasons(cfg, dict(MACHINE, simd=["amx_bf16"]))
    assert r[(2, 512, "fp32", "contiguous")] == "soft: batch > 256"
    assert r[(2, 32, "bf16", "contiguous")] == "soft: dtype excluded"
    assert r[(2, 32, "fp32", "contiguous")] == ""


def test_nothing_left_is_refused_naming_what_removed_it(monkeypatch):
    import hpclab.measure.sysinfo as sysinfo

    monkeypatch.setattr(sysinfo, "system_info", lambda refresh=False: MACHINE)
    cfg = AutotuneConfig.create(threads=(8,), batches=(32,), formats=("contiguous",))
    with pytest.raises(ConfigError, match=r"nothing left.*hard: threads > 4 usable cores: 2"):
        run_autotune(cfg, Progress())


def test_a_small_run_measures_every_survivor_and_the_default():
    cfg = AutotuneConfig.create(
        threads=(1,), batches=(16, 64), dtypes=("fp32",), formats=("contiguous",), side=8, repeat=3
    )
    recs = run_autotune(cfg, Progress()).records
    summary = recs[-1]
    assert summary["status"] == "summary"
    assert (summary["candidates"], summary["measured"], summary["pruned"]) == (4, 2, 2)
    measured = [r for r in recs if r["status"] == "measured"]
    assert {r["batch"] for r in measured} == {16, 64}
    assert all(
        r["samples_per_s_min"] <= r["samples_per_s"] <= r["samples_per_s_max"] for r in measured
    )
    best = max(r["samples_per_s"] for r in measured)
    default = next(r for r in recs if r["status"] == "default")["samples_per_s"]
    assert summary["best_vs_default"] == pytest.approx(best / default)
