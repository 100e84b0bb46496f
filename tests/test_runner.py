"""The glue every panel shares (:class:`hpclab.widgets.runner.Runner`), driven with plain
functions: a second Run returns at once and wins, a late result never shows, whatever ``before()``
raises is one line and nothing runs, Cancel; and the two views that are not experiment panels,
pressed by their buttons: the data-wait monitor (chapter 04) and the job monitor's Cancel
(chapter 07). The chapter panels themselves: tests/test_panels_click.py."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("ipywidgets")

from hpclab.config import ConfigError  # noqa: E402
from hpclab.progress import Cancelled  # noqa: E402
from hpclab.widgets.runner import Runner  # noqa: E402

JOIN_S = 300  # generous: a loaded 2-core machine; these take well under a second


# --- the data-wait monitor (chapter 04): no controls, Run / twice / Cancel ------------------------
def test_wait_monitor_run_twice_and_cancel_by_button():
    from hpclab.widgets.wait_monitor import wait_monitor

    with pytest.raises(ConfigError, match="format="):  # bad input: one line, at the call
        wait_monitor(format=("memmap", "zip"))
    m = wait_monitor(format=("memmap", "files-png"), workers=0, samples=64, steps=3,
                     shape=(1, 4, 4), device="cpu")  # fmt: skip
    m.runner.run_button.click()
    m.runner.cancel_button.click()
    m.runner.thread.join(JOIN_S)
    assert "cancelled" in m.status.value
    first = m.runner.thread
    m.runner.run_button.click()
    m.runner.run_button.click()  # twice quickly: one complete run shows, the first is cancelled
    m.runner.thread.join(JOIN_S)
    assert m.runner.thread is not first and "done: 6 steps" in m.status.value
    computing, waiting = m.figure.data
    assert list(computing.x) == list(range(1, 7)) and len(waiting.y) == 6
    assert [s["format"] for s in m.steps] == ["memmap"] * 3 + ["files-png"] * 3
    assert "memmap" in m.figure.layout.title.text and "files-png" in m.figure.layout.title.text


# --- the job monitor's Cancel (chapter 07): a failing scancel is one line --------------------------
def test_job_monitor_cancel_failure_is_one_line():
    from types import SimpleNamespace

    from hpclab.widgets.job_monitor import JobMonitor

    def scancel_missing():
        raise FileNotFoundError("[Errno 2] No such file or directory: 'scancel'\nmore")

    job = SimpleNamespace(job_id="7", cancel=scancel_missing, cluster=SimpleNamespace(poll_s=1))
    mon = JobMonitor(job, start=False)
    mon.cancel_button.click()  # must not raise
    assert "error: FileNotFoundError: [Errno 2]" in mon.status.value
    assert "more" not in mon.status.value


# --- the glue, with plain functions -----------------------------------------------------------------
def test_a_second_run_returns_at_once_and_the_first_ones_late_result_never_shows():
    """The first run ignores Cancel for a while (a long step): the click does not wait for it,
    the newer run starts when it has stopped, and its late result is refused."""
    release = threading.Event()
    shown: list[str] = []

    def work(progress, arg):
        if arg == "old":
            release.wait(JOIN_S)  # busy in a step that does not look at Cancel
        with runner.current(progress):
            shown.append(arg)
        return f"done: {arg}"

    args = iter(["old", "new"])
    runner = Runner(work, before=lambda: next(args))
    runner.run_button.click()
    old = runner.thread
    runner.run_button.click()  # returns although the old run is still busy
    new = runner.thread
    assert old.is_alive() and new is not old
    assert "stopping the previous run" in runner.status.value
    release.set()
    new.join(JOIN_S)
    assert shown == ["new"] and "done: new" in runner.status.value
    assert runner.cancel_button.disabled and not runner.run_button.disabled


def test_before_raising_anything_is_one_line_and_nothing_runs():
    ran = []

    def broken():
        raise ValueError("no such control\nsecond line")

    runner = Runner(lambda progress, arg: ran.append(arg) or "done", before=broken)
    runner.run_button.click()  # must not raise
    assert runner.thread is None and ran == []
    assert (
        "error: ValueError: no such control" in runner.status.value
        and "second line" not in runner.status.value
    )
    assert "Traceback" in runner.last_error and "Traceback" not in runner.status.value


def test_an_invalid_run_during_a_run_leaves_it_going_and_says_both():
    release = threading.Event()
    values = iter([{"ok": True}, ConfigError("size=0 is not allowed; allowed: 16..65536")])

    def before():
        v = next(values)
        if isinstance(v, Exception):
            raise v
        return v

    def work(progress, arg):
        release.wait(JOIN_S)
        with runner.current(progress):
            pass
        return "done: 1 record"

    runner = Runner(work, before=before)
    runner.start()
    runner.run_button.click()
    assert "size=0 is not allowed" in runner.status.value and "goes on" in runner.status.value
    release.set()
    runner.thread.join(JOIN_S)
    assert "done: 1 record" in runner.status.value and "size=0" in runner.status.value


def test_cancel_before_the_work_shows_anything():
    def work(progress, arg):
        runner.cancel()  # pressed while the run computes; the run never calls update
        with runner.current(progress):
            raise AssertionError("a cancelled run must not show its result")

    runner = Runner(work)
    runner.start(wait=True)
    assert "cancelled" in runner.status.value and runner.last_error == ""


def test_current_refuses_a_replaced_run():
    runner = Runner(lambda progress, arg: "done")
    runner.start(wait=True)
    old = runner.progress
    runner.start(wait=True)
    with pytest.raises(Cancelled), runner.current(old):
        pass


def test_an_error_a_cancel_causes_reads_as_cancelled():
    """A run that answers Cancel with its own error (a search says how many trials it kept)
    shows "cancelled" with that line, not an error."""
    started = threading.Event()

    def work(progress, _arg):
        started.set()
        progress.cancel_event.wait(10)
        raise RuntimeError("search stopped, interrupted: 1 finished, 2 never run of 3 trials")

    r = Runner(work)
    r.run_button.click()
    assert started.wait(10)
    r.cancel_button.click()
    r.thread.join(10)
    assert "cancelled: search stopped" in r.status.value and "error" not in r.status.value
    assert r.last_error == ""
