"""Chapter 08: one trial everywhere, strategies that respect the budget, Celery that loses nothing."""

from __future__ import annotations

import math
import os
import time

import psutil
import pytest
from listening import Watch

from hpclab.progress import Progress
from hpclab.search.broker import broker_problem
from hpclab.search.celery_backend import run_celery as _celery
from hpclab.search.search_experiment import SearchConfig, run_search
from hpclab.search.strategies import SPACE, Searcher, grid_points
from hpclab.trial import run_trial


def test_grid_fits_the_budget_and_covers_every_choice():
    for budget in (6, 12, 50):
        points = grid_points(budget)
        assert 1 <= len(points) <= budget
        assert len({tuple(sorted(p.items())) for p in points}) == len(points)  # no repeats
    full = grid_points(6 * 9)  # 2 models x 3 batch sizes x 3 x 3
    assert len(full) == 54 and {p["model"] for p in full} == {"tiny", "large"}
    assert {p["batch_size"] for p in full} == {16, 64, 256}


@pytest.mark.parametrize("strategy", ["random", "tpe"])
def test_strategies_stay_in_the_space_and_are_reproducible(strategy):
    def draw(seed):
        s = Searcher(strategy, budget=10, seed=seed)
        out = []
        while batch := s.ask(3):
            for index, params in batch:
                s.tell(index, (math.log10(params["lr"]) + 1.5) ** 2)  # best lr ~ 0.03
                out.append(params)
        return out

    a, b, c = draw(1), draw(1), draw(2)
    assert len(a) == 10 and a == b and a != c
    lr = next(d for d in SPACE if d.name == "lr")
    assert all(lr.low <= p["lr"] <= lr.high for p in a)
    assert all(p["batch_size"] in (16, 64, 256) for p in a)


def test_a_trial_is_deterministic_and_learns():
    p = {"model": "tiny", "batch_size": 64, "lr": 0.1}
    one, two = run_trial(p, epochs=2), run_trial(p, epochs=2)
    assert one["val_loss"] == two["val_loss"]
    assert one["val_loss"] < math.log(10)  # better than guessing among 10 classes
    stopped = run_trial(p, epochs=3, report=lambda epoch, loss: epoch == 0)
    assert stopped["pruned"] and stopped["epochs"] == 1


def _need_broker() -> None:
    """CI installs redis-server and Celery (.ci/run): there a missing broker is a failure."""
    problem = broker_problem()
    if problem and os.environ.get("CI"):
        pytest.fail(problem)
    if problem:
        pytest.skip(problem)


def _leftovers() -> list[str]:
    """Redis servers and Celery workers started by this test process that are still alive
    (another user's, or another test run's, on the same node are not ours)."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if "hpclab-redis-" in cmd or "hpclab.search.tasks" in cmd:
            out.append(cmd[:80])
    return out


def test_celery_runs_the_same_trials_as_the_sequential_loop():
    _need_broker()
    cfg = dict(strategy="grid", trials=2, epochs=1, workers=2)
    seq = run_search(SearchConfig.create(backend="sequential", **cfg), Progress())
    ours = lambda cmd: any("hpclab-redis-" in a or "hpclab.search.tasks" in a for a in cmd)  # noqa: E731
    with Watch(ours) as watch:
        cel = run_search(SearchConfig.create(backend="celery", **cfg), Progress())
    # Redis on a unix socket in a 0700 directory, workers that only connect: nothing on TCP
    # beyond loopback (and Redis not on TCP at all)
    assert {"redis-server"} <= {name for _, name in watch.procs}, watch.procs
    watch.assert_loopback_only("the Celery broker and workers")
    assert not [x for x in watch.seen if x[1] == "redis-server"], watch.seen
    assert [r["params"] for r in seq.records] == [r["params"] for r in cel.records]
    for a, b in zip(seq.records, cel.records, strict=True):
        assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-6)
    assert len({r["worker"] for r in cel.records}) == 2  # both workers had a trial
    assert all(r["overhead_s"] >= 0 and not r["error"] for r in cel.records)
    assert _leftovers() == []


def test_a_worker_killed_mid_trial_loses_no_trial():
    """Kill worker w0 while it trains: its trial runs again on w1; every trial has a result."""
    _need_broker()
    killed: list[int] = []
    t0 = time.monotonic()

    def kill_w0(done, total, note):
        if killed or time.monotonic() - t0 < 1.0 or "running" not in note:
            return
        for p in psutil.Process().children(recursive=True):
            try:
                mine = "w0@%h" in p.cmdline()
            except psutil.Error:
                continue
            if mine:
                p.kill()
                killed.append(p.pid)

    cfg = SearchConfig.create(backend="celery", strategy="grid", trials=3, epochs=8, workers=2)
    records = _celery(cfg, Searcher("grid", 3), Progress(kill_w0))
    assert killed, "the test did not manage to kill a worker"
    assert [r.trial for r in records] == [0, 1, 2]
    assert all(math.isfinite(r.val_loss) and r.fate == "finished" for r in records), records
    assert sum(r.retries for r in records) >= 1
    assert _leftovers() == []


def test_a_broker_that_cannot_start_is_one_line_and_exit_1(tmp_path):
    import subprocess
    import sys

    env = dict(os.environ, HPCLAB_REDIS_SERVER=str(tmp_path / "no-redis-server"))
    out = subprocess.run(
        [sys.executable, "-m", "hpclab.cli", "run", "search", "--backend", "celery", "--trials", "1"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert "redis-server not found" in last and "HPCLAB_REDIS_SERVER" in last
    assert "Traceback" not in out.stderr
    assert _leftovers() == []
