"""Chapter 08 on the local Slurm: one search as a job array, as submitit's array and on Celery
workers inside one job gives the sequential loop's losses; nothing is left behind."""

from __future__ import annotations

import math
import os
import threading

import pytest
from test_search import _need_broker

from hpclab.config import ConfigError
from hpclab.progress import Progress
from hpclab.search.search_experiment import SearchConfig, run_search

QUICK = dict(strategy="random", trials=3, epochs=1, samples=120, seed=3)
FIELDS = ("trial", "params", "val_loss", "seconds", "overhead_s", "queue_s", "startup_s",
          "start_s", "end_s", "worker", "retries", "error", "utilisation", "wall_s")  # fmt: skip


def _same_losses(a, b) -> None:
    assert [r["params"] for r in a.records] == [r["params"] for r in b.records]
    for x, y in zip(a.records, b.records, strict=True):
        assert abs(x["val_loss"] - y["val_loss"]) < 1e-6, (x, y)


def test_bad_array_settings_are_one_line():
    with pytest.raises(ConfigError, match="throttle"):
        SearchConfig.create(backend="array", throttle=0)
    with pytest.raises(ConfigError, match="per_task=5 exceeds trials=3"):
        SearchConfig.create(backend="array", trials=3, per_task=5)
    from hpclab.cluster.arrays import array_option, modelled_wall_s

    assert array_option(7, 2, per_task=3) == "0-2%2"  # ceil(7/3) = 3 tasks
    assert modelled_wall_s(7, 2, 1.0, 0.5, per_task=3) == 2 * (0.5 + 3)


def test_submitit_parameters_come_from_the_job_spec():
    from hpclab.cluster import profiles
    from hpclab.cluster.spec import JobSpec
    from hpclab.cluster.submitit_exec import parameters

    site = profiles.load("local")
    p = parameters(JobSpec(name="s", cpus_per_task=2, time="00:07:00", array="0-5%3"), site)
    extra = p["additional_parameters"]
    assert extra["job_name"] == "s" and extra["cpus_per_task"] == "2"
    assert extra["time"] == "00:07:00" and "array" not in extra
    assert p["array_parallelism"] == 3 and p["time"] == 7
    assert any(line.startswith("export PYTHONPATH=") for line in p["setup"])
    with pytest.raises(ConfigError, match="exceeds"):
        parameters(JobSpec(nodes=99), site)


def test_array_and_submitit_give_the_sequential_losses(cluster):
    seq = run_search(SearchConfig.create(backend="sequential", **QUICK), Progress())
    arr = run_search(SearchConfig.create(backend="array", per_task=2, **QUICK), Progress())
    sub = run_search(SearchConfig.create(backend="submitit", throttle=2, **QUICK), Progress())
    for res in (arr, sub):
        _same_losses(seq, res)
        for r in res.records:
            assert set(FIELDS) <= set(r) and not r["error"]
            # one clock for the searcher and the job: submitted before compute began, and the
            # result seen after the compute ended (two clocks broke this by their offset)
            assert r["start_s"] <= r["began_s"] <= r["end_s"] - r["seconds"] + 0.05
            assert r["overhead_s"] >= r["queue_s"] + r["startup_s"] - 0.05
    # per_task=2: trials 0 and 1 share a process (one start-up), trial 2 has its own
    first, second, third = arr.records
    assert first["worker"] == second["worker"] != third["worker"]
    assert first["startup_s"] > 0 and second["startup_s"] == 0 and third["startup_s"] > 0
    from hpclab.search.search_experiment import backends_table, plot_search

    lanes = {bar.y[0] for bar in plot_search(arr).data if bar.type == "bar"}
    assert lanes and lanes <= {"slot 1", "slot 2"}  # never more at once than the throttle
    table = backends_table([seq, arr, sub])
    assert list(table.index) == ["sequential", "array", "submitit"]
    assert (table["of which start-up (s)"] > 0).tolist() == [False, True, True]


def test_celery_in_one_job_gives_the_losses_and_leaves_nothing(cluster):
    _need_broker()
    from hpclab.search import allocation

    seen: dict = {}
    real = allocation.celery_allocation

    def spy(*a, **kw):
        cm = real(*a, **kw)

        class Wrap:
            def __enter__(self):
                url, pool = cm.__enter__()
                seen.update(url=url, pool=pool, workers=allocation.workers_alive(url))
                return url, pool

            def __exit__(self, *exc):
                return cm.__exit__(*exc)

        return Wrap()

    mp = pytest.MonkeyPatch()
    mp.setattr(allocation, "celery_allocation", spy)
    try:
        seq = run_search(SearchConfig.create(backend="sequential", **QUICK), Progress())
        cel = run_search(SearchConfig.create(backend="celery", where="slurm", **QUICK), Progress())
    finally:
        mp.undo()
    _same_losses(seq, cel)
    assert len(seen["workers"]) == 2  # two workers ran in the job
    assert seen["pool"].job.state().state in ("CANCELLED", "COMPLETED")
    assert allocation.workers_alive(seen["url"]) == []
    assert not os.path.exists(seen["url"].removeprefix("redis+socket://"))  # Redis stopped


def test_cancelling_the_workers_job_fails_trials_loudly(cluster):
    """scancel the job mid-search: one clear error, every trial accounted for, nothing left."""
    _need_broker()
    from hpclab.search.fates import SearchIncomplete, fate_counts

    fired = threading.Event()

    def cancel_after_two(done, total, note):
        if done >= 2 and not fired.is_set():
            fired.set()
            for q in cluster.queue():
                if q["name"] == "celery-workers" and q["state"] == "RUNNING":
                    cluster.cancel(q["job_id"])

    cfg = SearchConfig.create(backend="celery", where="slurm", strategy="random", trials=30,
                              epochs=2, samples=300)  # fmt: skip
    with pytest.raises(SearchIncomplete) as err:
        run_search(cfg, Progress(cancel_after_two))
    msg = str(err.value)
    assert fired.is_set() and "ended CANCELLED mid-search" in msg
    counts = fate_counts(err.value.result.records)
    assert counts["finished"] >= 2 and sum(counts.values()) == 30
    assert f"{counts['finished']} finished" in msg and f"{counts['never run']} never run" in msg


def test_a_workers_job_caught_completing_reports_how_it_ended(tmp_path):
    """scancel leaves a job COMPLETING while Slurm kills its processes (seconds, more under
    load): the pool waits for the final state instead of reporting the transition."""
    from hpclab.cluster.slurm import Job, JobState
    from hpclab.search.allocation import AllocationPool

    class Scripted:  # the controller's answers, one per query; the last one repeats
        poll_s = 0.01

        def __init__(self, *states: str):
            self.answers = list(states)

        def states(self, job_id: str) -> list[JobState]:
            state = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
            return [JobState(job_id, state)]

    ctl = Scripted("COMPLETING", "COMPLETING", "COMPLETING", "CANCELLED")
    pool = AllocationPool(Job(ctl, "41", tmp_path, ""), workers=2)
    assert pool.ended() and pool.state == "CANCELLED" and ctl.answers == ["CANCELLED"]
    running = AllocationPool(Job(Scripted("RUNNING"), "42", tmp_path, ""), workers=2)
    assert not running.ended() and running.state == "RUNNING"


@pytest.mark.parametrize("backend", ["array", "submitit"])
def test_cancelling_the_array_fails_the_trials_it_did_not_run(cluster, backend):
    """submitit alone would wait for ever here (no sacct: state UNKNOWN, no result pickle)."""

    def cancel_after_one(done, total, note):
        if done >= 1 and "array" in note:
            cluster.cancel(note.split()[-1])

    cfg = SearchConfig.create(backend=backend, throttle=1, **QUICK)
    records = run_search(cfg, Progress(cancel_after_one)).records
    assert [r["trial"] for r in records] == [0, 1, 2]  # none lost
    assert not records[0]["error"] and math.isfinite(records[0]["val_loss"])
    failed = [r for r in records if r["error"]]
    assert failed and all("CANCELLED" in r["error"] for r in failed), failed
    assert all(r["val_loss"] == math.inf for r in failed)
