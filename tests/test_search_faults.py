"""Chapter 08's search under faults: workers killed, Redis killed, Ctrl-C. Each test runs the real
CLI (a private Redis, two Celery workers), injects the fault once a trial has finished, and
asserts: every trial asked for is accounted for (finished + failed + stopped + never run), the
finished ones are kept, the message is one line naming the cause, the exit status is non-zero,
nothing is left running. About 10-15 s each on 2 busy cores."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest
import redis.exceptions as redis_errors
from test_search import _need_broker

from hpclab.progress import Progress
from hpclab.search.fates import FATES, SearchIncomplete, fate_counts
from hpclab.search.search_experiment import SearchConfig, run_search

TRIALS = 30


def _tree(proc: subprocess.Popen) -> list[psutil.Process]:
    try:
        return psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _cmd(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


class _Collected:
    """Trials the searcher has collected, read from every command Redis executes (``MONITOR``):
    a result written with SUCCESS and then deleted (the searcher forgets each result once it
    holds it). Polling the keys missed them: the searcher collects a result within ~20 ms of its
    write, and a 0.1 s poll saw none of 28 finished trials in one CI run."""

    def __init__(self, sock: str) -> None:
        import threading

        import redis

        self.succeeded: set[str] = set()
        self.collected: set[str] = set()
        self._monitor = redis.Redis(unix_socket_path=sock, socket_timeout=None).monitor()
        self._monitor.__enter__()  # connected before this returns: no write is missed after
        threading.Thread(target=self._listen, daemon=True).start()

    def _listen(self) -> None:
        try:
            while True:
                cmd = self._monitor.next_command()["command"]
                key = re.search(r"celery-task-meta-[\w-]+", cmd)
                if not key:
                    continue
                verb = cmd.split(" ", 1)[0].upper()
                if verb.startswith("SET") and "SUCCESS" in cmd:
                    self.succeeded.add(key[0])
                elif verb in ("DEL", "UNLINK") and key[0] in self.succeeded:
                    self.collected.add(key[0])
        except Exception:  # noqa: BLE001 - Redis killed or closed: nothing more to read
            return


def _search_then(fault, tmp_path, save: bool = False):
    """Start a 30-trial Celery search in the CLI; once one trial has finished, ``fault(redis,
    workers, cli)`` (once the searcher holds it: a result still in Redis dies with it); returns (exit code, stdout JSON, stderr, every process the run started)."""
    _need_broker()
    env = dict(os.environ, HPCLAB_RESULTS=str(tmp_path / "store"))
    argv = [sys.executable, "-m", "hpclab.cli", "run", "search", "--backend", "celery",
            "--trials", str(TRIALS), "--epochs", "2", "--samples", "200", "--workers", "2",
            "--json", *(["--save"] if save else [])]  # fmt: skip
    # its own process group, as a shell gives a command: what its tree signals to its group
    # never reaches this test process
    cli = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)  # fmt: skip
    seen: dict[int, psutil.Process] = {}
    watch: _Collected | None = None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and cli.poll() is None:
            procs = _tree(cli)
            seen.update({p.pid: p for p in procs})
            redis = [p for p in procs if "hpclab-redis-" in _cmd(p)]
            workers = [p for p in procs if "hpclab.search.tasks" in _cmd(p) and "worker" in _cmd(p)]
            if redis and len(workers) == 2:
                sock = re.search(r"(/\S*hpclab-redis-[^/\s]+)", _cmd(redis[0]))[1] + "/redis.sock"
                if watch is None:
                    with contextlib.suppress(OSError, redis_errors.RedisError):
                        watch = _Collected(sock)  # None until Redis answers on its socket
                if watch is not None and watch.collected:
                    t_fault = time.monotonic()
                    fault(redis[0], workers, cli)
                    break
            time.sleep(0.01)
        else:
            ended = cli.poll()
            tail = cli.stderr.read()[-1500:] if ended is not None else "(still running)"
            pytest.fail(
                "the search ended or never started before the fault could be injected: "
                f"exit code {ended}, {len(watch.collected) if watch else 0} result(s) seen collected "
                f"in Redis; stderr: {tail}"
            )
        out, err = cli.communicate(timeout=120)
        print(f"the run ended {time.monotonic() - t_fault:.1f} s after the fault")
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    return cli.returncode, out, err, list(seen.values())


def _check(code, out, err, started, cause: str, expect_code: int = 1) -> dict:
    """The common promise of every fault; returns the printed result."""
    assert code == expect_code, err
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("hpclab: error: search stopped") and cause in last, err
    result = json.loads(out)  # strict JSON: a failed trial's loss is null, not Infinity
    recs = result["records"]
    assert [r["trial"] for r in recs] == list(range(TRIALS))  # every trial accounted for
    counts = fate_counts(recs)
    assert sum(counts.values()) == TRIALS and set(counts) == set(FATES)
    finished = [r for r in recs if r["fate"] == "finished"]
    assert finished and all(math.isfinite(r["val_loss"]) for r in finished)  # nothing lost
    assert f"{counts['finished']} finished" in last and f"{counts['never run']} never run" in last
    assert counts["never run"] > 0
    alive = [p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, [_cmd(p) for p in alive]  # nothing left running
    return result


def test_all_workers_killed_accounts_for_every_trial(tmp_path):
    def kill_workers(redis, workers, cli):
        for w in workers:
            w.kill()

    code, out, err, started = _search_then(kill_workers, tmp_path)
    result = _check(code, out, err, started, "all 2 workers died: killed by SIGKILL (signal 9)")
    failed = [r for r in result["records"] if r["fate"] == "failed"]
    assert all(r["cause"] == "worker lost" for r in failed)


def test_redis_killed_keeps_finished_trials_in_result_and_store(tmp_path):
    def kill_redis(redis, workers, cli):
        redis.kill()

    code, out, err, started = _search_then(kill_redis, tmp_path, save=True)
    result = _check(code, out, err, started, "the broker (Redis) is gone")
    from hpclab import results as store

    saved = store.load(1, tmp_path / "store" / "results.sqlite")
    assert [r["fate"] for r in saved.records] == [r["fate"] for r in result["records"]]


def test_ctrl_c_stops_the_search_and_keeps_what_finished(tmp_path):
    def ctrl_c(redis, workers, cli):
        cli.send_signal(signal.SIGINT)

    code, out, err, started = _search_then(ctrl_c, tmp_path)
    _check(code, out, err, started, "interrupted", expect_code=130)


def test_a_sequential_search_cancelled_keeps_its_finished_trials():
    """The same vocabulary on the sequential loop (no broker): Cancel after two trials."""
    progress = Progress(lambda done, total, note: done >= 1 and progress.cancel())
    cfg = SearchConfig.create(backend="sequential", trials=5, epochs=1, samples=100)
    with pytest.raises(
        SearchIncomplete, match=r"2 finished, 0 failed, 0 stopped, 3 never run"
    ) as err:
        run_search(cfg, progress)
    from hpclab.search.search_experiment import backends_table, plot_search

    partial = err.value.result  # the table and the plot show all four fates
    row = backends_table([partial]).iloc[0]
    assert [row[f] for f in FATES] == [2, 0, 0, 3] and row["trials"] == 5
    names = [t.name for t in plot_search(partial).data if t.type == "scatter"]
    assert "never run (3)" in names
