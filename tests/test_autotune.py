"""Chapter 08: the autotuner prunes by the machine's facts and the student's wishes, screens the
survivors in parallel on disjoint cores, and re-measures the best few and the default alone."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from hpclab.config import ConfigError
from hpclab.progress import Progress
from hpclab.search.autotune import AutotuneConfig, prune, pruning_table, run_autotune
from hpclab.search.screen import KNOBS, cores_needed, screen

MACHINE = {
    "cores_usable": 4,
    "cores_node": 8,
    "simd": ["avx2"],
    "mem_available_gb": 16.0,
    "gpus": [],
}
SMALL_BF16 = {"cores_usable": 2, "cores_node": 2, "simd": ["avx512_bf16"], "mem_available_gb": 4.0}
BIG = {"cores_usable": 16, "cores_node": 16, "simd": ["amx_bf16"], "mem_available_gb": 64.0}
USABLE = sorted(os.sched_getaffinity(0))


def reasons(cfg, info=MACHINE):
    return {tuple(c[k] for k in KNOBS): why for c, why in prune(cfg, info)}


def key(threads, ranks, batch=32, workers=0, bucket=25.0, dtype="fp32", fmt="contiguous"):
    return (threads, ranks, batch, workers, bucket, dtype, fmt)


def test_hard_constraints_come_from_the_machine():
    cfg = AutotuneConfig.create(
        batches=(32, 48), loader_workers=(0, 1), buckets_mb=(1.0, 25.0), dtypes=("fp32", "bf16"),
        formats=("contiguous",),
    )  # fmt: skip
    r = reasons(cfg)
    assert {k[0] for k in r} == {1, 2, 4, 8} == {k[1] for k in r}  # up to the node
    assert r[key(8, 1)] == "hard: ranks x threads > 4 usable cores"
    assert r[key(2, 4)] == "hard: ranks x threads > 4 usable cores"
    assert r[key(2, 2)] == ""  # 2 x 2 = 4 cores: fits exactly
    assert r[key(2, 2, workers=1)] == "hard: ranks x (threads + loader workers) > 4 usable cores"
    assert r[key(1, 2, workers=1)] == ""  # 2 x (1 + 1) = 4
    assert r[key(1, 4, batch=48)] == ""
    assert r[key(1, 4, batch=48, bucket=1.0)] == ""  # several ranks: every bucket size counts
    assert r[key(1, 1, bucket=1.0)].startswith("hard: bucket size unused with 1 rank")
    assert r[key(1, 1, bucket=25.0)] == ""  # one value kept: DDP's default
    assert r[key(1, 4, batch=48)] == "" and r[key(2, 2, batch=48)] == ""
    assert (
        reasons(AutotuneConfig.create(batches=(30,), ranks=(4,), threads=(1,)))[key(1, 4, batch=30)]
        == "hard: batch not divisible by ranks"
    )
    assert r[key(4, 1, dtype="bf16")] == "hard: no native bf16 on this CPU"
    assert r[key(4, 1)] == ""
    # Another machine, other answers: 2 cores with bf16, a 16-core node.
    small = reasons(cfg, SMALL_BF16)
    assert {k[0] for k in small} == {1, 2}
    assert small[key(2, 1, dtype="bf16")] == ""
    assert small[key(1, 2)] == "" and small[key(2, 2)].startswith("hard: ranks x threads > 2")
    big = reasons(cfg, BIG)
    assert big[key(4, 4, workers=0)] == "" and big[key(4, 4, workers=1)].startswith(
        "hard: ranks x (threads + loader workers) > 16"
    )
    assert big[key(16, 1)] == "" and big[key(8, 2, workers=1)].startswith("hard: ranks x (")
    tiny_memory = reasons(
        AutotuneConfig.create(batches=(65536,), side=128, ranks=(1,), loader_workers=(0,)),
        dict(MACHINE, mem_available_gb=1),
    )
    assert all(
        w.startswith("hard: memory")
        for k, w in tiny_memory.items()
        if k[0] <= 4 and k[4] == 25.0 and k[5] == "fp32"
    )


def test_the_bucket_rule_keeps_one_value_and_names_it():
    r = reasons(AutotuneConfig.create(buckets_mb=(0.0, 5.0), batches=(32,)), MACHINE)
    assert r[key(1, 1, bucket=0.0)] == ""  # no 25 MB offered: the first value is kept
    assert r[key(1, 1, bucket=5.0)] == "hard: bucket size unused with 1 rank (kept 0 MB)"


def test_soft_constraints_come_from_the_student():
    cfg = AutotuneConfig.create(
        batches=(32, 512), dtypes=("fp32",), max_batch=256, formats=("contiguous",)
    )
    r = reasons(cfg, dict(MACHINE, simd=["amx_bf16"]))
    assert r[key(2, 1, batch=512)] == "soft: batch > 256"
    assert r[key(2, 1, dtype="bf16")] == "soft: dtype excluded"
    assert r[key(2, 1)] == ""


def test_the_pruning_table_counts_every_candidate_once():
    cfg = AutotuneConfig.create(batches=(32, 48), formats=("contiguous",))
    table = pruning_table(cfg, MACHINE)
    assert table["candidates"].sum() == len(prune(cfg, MACHINE))
    kept = sum(1 for _, why in prune(cfg, MACHINE) if not why)
    assert table.loc["kept: measured", "candidates"] == kept > 0


def test_nothing_left_is_refused_naming_what_removed_it(monkeypatch):
    import hpclab.measure.sysinfo as sysinfo

    monkeypatch.setattr(sysinfo, "system_info", lambda refresh=False: MACHINE)
    cfg = AutotuneConfig.create(
        threads=(8,), ranks=(1, 2), batches=(32,), loader_workers=(0,), buckets_mb=(25.0,),
        formats=("contiguous",),
    )  # fmt: skip
    with pytest.raises(ConfigError) as err:
        run_autotune(cfg, Progress())
    text = str(err.value)
    assert "nothing left to measure after pruning 4 candidates" in text
    assert "hard: ranks x threads > 4 usable cores: 4" in text
    cfg = AutotuneConfig.create(
        threads=(1,), ranks=(3,), batches=(32,), loader_workers=(0,), dtypes=("bf16",),
        buckets_mb=(25.0,), formats=("contiguous",),
    )  # fmt: skip
    with pytest.raises(ConfigError, match=r"batch not divisible by ranks: 2\)"):
        run_autotune(cfg, Progress())


def _one_core(batch):
    return dict(threads=1, ranks=1, batch=batch, loader_workers=0, bucket_cap_mb=25.0,
                dtype="fp32", memory_format="contiguous")  # fmt: skip


@pytest.mark.skipif(len(USABLE) < 2, reason="needs two usable cores to screen side by side")
def test_parallel_screening_pins_candidates_to_disjoint_cores():
    cands = [_one_core(b) for b in (16, 24, 32, 40)] + [
        dict(_one_core(32), ranks=2),  # one core per rank
        dict(_one_core(16), loader_workers=1),  # the rank and its worker share two cores
    ]
    cpus = tuple(USABLE[:2])
    runs, wall, most = screen(cands, cpus, 0, 8, 3, Progress())
    assert most == 2  # two one-core candidates at once
    for c, r in zip(cands, runs, strict=True):
        got = [set(s) for s in r["cpus"]]  # affinity each rank process reported itself
        assert len(got) == c["ranks"] and set().union(*got) <= set(cpus)
        assert sum(len(s) for s in got) == cores_needed(c)  # its own cores, all of them
        if c["ranks"] == 2:
            assert got[0].isdisjoint(got[1])
        assert r["samples_per_s_min"] <= r["samples_per_s"] <= r["samples_per_s_max"]
        assert {"own_cores", "others_cores", "disturbed", "wall_s"} <= set(r)
    overlaps = 0
    for i, a in enumerate(runs):
        for b in runs[i + 1 :]:
            if a["start_s"] < b["end_s"] and b["start_s"] < a["end_s"]:  # ran at the same time
                overlaps += 1
                assert (
                    set().union(*map(set, a["cpus"])).isdisjoint(set().union(*map(set, b["cpus"])))
                )
    assert overlaps >= 1
    _, _, one = screen(cands[:2], cpus, 1, 8, 3, Progress())
    assert one == 1


def test_a_busy_process_on_the_cores_flags_the_run_and_a_loader_worker_does_not():
    """The CPU share is measured per rank on its own cores: a hog there is "others"; the rank's
    own DataLoader worker (a child process) is not."""
    from hpclab.measure.cpu_share import measure_cpu_share

    code = "import time\nt=time.time()\nwhile time.time()-t<1.2: pass"
    hog = subprocess.Popen([sys.executable, "-c", code.replace("1.2", "30")])
    try:
        time.sleep(0.2)
        child = psutil.Process(hog.pid)
        c0 = sum(child.cpu_times()[:2])
        with measure_cpu_share(descendants=True) as mine, measure_cpu_share() as plain:
            time.sleep(0.8)
        c1 = sum(child.cpu_times()[:2])
    finally:
        hog.kill()
        hog.wait(10)
    # The same window: counted with its children, this process used the child's CPU seconds
    # too (as many as the child got on this machine, at any load; clock ticks of 10 ms).
    extra_s = mine.value.own_cores * mine.value.wall_s - plain.value.own_cores * plain.value.wall_s
    assert c1 - c0 > 0 and extra_s == pytest.approx(c1 - c0, abs=0.05)
    core = USABLE[-1]
    pinned = f"import os\nos.sched_setaffinity(0, {{{core}}})\n" + code.replace("1.2", "5.0")
    hog = subprocess.Popen([sys.executable, "-c", pinned])
    try:
        time.sleep(0.3)
        runs, _, _ = screen([_one_core(64)], (core,), 0, 16, 20, Progress())
    finally:
        hog.kill()
        hog.wait(10)
    assert runs[0]["cpus"] == [[core]]
    assert runs[0]["disturbed"] and runs[0]["others_cores"] > 0


def test_a_small_run_screens_every_survivor_and_re_measures_the_best_and_the_default():
    cfg = AutotuneConfig.create(
        threads=(1,), ranks=(1, 2), batches=(16, 64), loader_workers=(0, 1), buckets_mb=(25.0,),
        dtypes=("fp32",), formats=("contiguous",), side=8, repeat=3, finalists=2, rounds=2,
    )  # fmt: skip
    recs = run_autotune(cfg, Progress()).records
    summary = recs[-1]
    assert summary["status"] == "summary"
    judged = prune(cfg, {**MACHINE, "cores_usable": len(USABLE)})
    kept = [c for c, why in judged if not why]
    assert summary["candidates"] == 2 * 2 * 2 * 2 == len(judged)
    assert (summary["measured"], summary["pruned"]) == (len(kept), len(judged) - len(kept))
    measured = [r for r in recs if r["status"] == "measured"]
    assert sorted(tuple(r[k] for k in KNOBS) for r in measured) == sorted(
        tuple(c[k] for k in KNOBS) for c in kept
    )
    assert all(r["cpus"] and r["samples_per_s"] > 0 for r in measured)
    final = [r for r in recs if r["status"] == "final"]
    assert final[0]["role"] == "default" and final[0]["threads"] == len(USABLE)
    assert len(final) == 1 + min(2, len(measured)) and all(
        len(r["samples_per_s_rounds"]) == 2 for r in final
    )
    best = max(r["samples_per_s"] for r in final)
    assert summary["best_vs_default"] == pytest.approx(best / final[0]["samples_per_s"])
    assert summary["best_vs_default"] >= 1.0  # the default is one of the re-measured
    assert 0 < summary["screen_s"] and 0 < summary["screen_serial_s"]
    assert set(summary["best"]) == set(KNOBS)


def test_the_knobs_change_the_speed_not_what_is_learned():
    """DataLoader workers deliver the very same batches; channels-last weights compute the same
    step (to rounding); bf16 autocast stays close to fp32 (a different dtype, so not equal)."""
    from dataclasses import replace

    from hpclab.dist import launch
    from hpclab.train import TrainSpec, ddp_worker, preload

    preload()  # forked ranks start with torch's lazy imports done
    spec = TrainSpec(model="cnn", side=8, per_rank_batch=16, steps=4, warmup=1, samples=128,
                     measure_compute=False, measure_allreduce=False)  # fmt: skip

    def last(**kw):
        outs = launch(ddp_worker, 1, args=(replace(spec, **kw),), device="cpu", threads_per_rank=1)
        return outs[0]["loss_last"]

    base = last()
    assert last(loader_workers=1) == base
    assert last(memory_format="channels_last") == pytest.approx(base, rel=1e-5)
    bf16 = last(dtype="bf16")
    assert bf16 == pytest.approx(base, rel=0.05) and bf16 != base


def test_a_candidate_that_fails_is_reported_and_the_others_still_run():
    bad = dict(_one_core(16), dtype="fp8")  # the training step refuses it in the rank
    runs, _, _ = screen([bad, _one_core(16)], tuple(USABLE[:1]), 0, 8, 3, Progress())
    assert "fp8" in runs[0]["failed"] and "samples_per_s" not in runs[0]
    assert runs[1]["samples_per_s"] > 0


def test_plot_names_the_winner_even_when_it_is_the_default():
    from types import SimpleNamespace

    from hpclab.search.autotune_plot import plot_autotune

    base = dict(threads=2, ranks=1, batch=128, loader_workers=0, bucket_cap_mb=25.0,
                dtype="fp32", memory_format="contiguous")  # fmt: skip
    other = dict(base, batch=256)

    def run(default_alone: float, other_alone: float):
        rows = [
            dict(base, status="default", samples_per_s=900.0, samples_per_s_min=800.0,
                 samples_per_s_max=950.0),
            dict(base, status="measured", samples_per_s=1000.0, samples_per_s_min=900.0,
                 samples_per_s_max=1100.0),
            dict(other, status="measured", samples_per_s=1200.0, samples_per_s_min=1100.0,
                 samples_per_s_max=1300.0),
            dict(base, status="final", role="default", samples_per_s=default_alone),
            dict(other, status="final", role="finalist", samples_per_s=other_alone),
        ]  # fmt: skip
        win = base if default_alone >= other_alone else other
        summary = dict(status="summary", candidates=3, pruned=0, measured=2, best=win,
                       best_vs_default=max(default_alone, other_alone) / default_alone,
                       screen_s=1.0, screen_serial_s=2.0, disturbed=0,
                       disturbed_final_rounds=0)  # fmt: skip
        fig = plot_autotune(SimpleNamespace(records=[*rows, summary]))
        bars = fig.data[0]
        green = [y for y, c in zip(bars.y, bars.marker.color, strict=True) if c == "#2ca02c"]
        return fig.layout.title.text, green

    title, green = run(default_alone=1000.0, other_alone=800.0)
    assert "the default won" in title and len(green) == 1 and green[0].endswith("(default)")
    title, green = run(default_alone=800.0, other_alone=1000.0)
    assert "best = 1.25x default" in title and len(green) == 1 and "batch 256" in green[0]
