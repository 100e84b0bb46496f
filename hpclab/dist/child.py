"""Inside one rank: quiet output, threads, the process group, and one message home (chapter 00).

Each rank owns one pipe to the parent (never a queue shared by all ranks: a rank killed while
writing into a shared queue would hold its lock and silence the others). Messages are
``(kind, payload)``: ``("progress", (done, total, note))``, ``("result", pickled value)`` or
``("error", (summary, traceback, peer_loss, at))``.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from hpclab.dist.context import (
    RankContext,
    destroy_process_group,
    init_process_group,
    leave_together,
)
from hpclab.dist.failures import is_peer_loss
from hpclab.dist.placement import torch_threads


def rank_process_setup(rank: int) -> None:
    """Linux: a session of its own; die with the parent, so a killed kernel leaves no rank
    behind; and carry the name ``hpclab-rankN`` in ``ps``/``top``, so a rank can be found (and
    killed, to see).

    The session is torchrun's choice too. Where the kernel groups processes for scheduling by
    session (``/proc/sys/kernel/sched_autogroup_enabled``, the default on most distributions),
    CPU time is shared between sessions first: ranks left in the launching process's session
    share one session's weight against every other session, so a rank that wakes from a
    collective waits longer for its core. Measured on a quiet 2-core VM (FSDP2 ZeRO-3 on 2 gloo
    ranks, 5 interleaved rounds): median step 83.9 ms in the launcher's session, 77.0 ms each in
    its own, 72.0 ms under torchrun.
    """
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError):  # already a session leader: nothing to do
        os.setsid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
        libc.prctl(15, f"hpclab-rank{rank}".encode()[:15])  # PR_SET_NAME = 15
    except (OSError, AttributeError):
        pass


def _own_output(log_path: str) -> None:
    """fds 1 and 2 (C-level output from gloo/NCCL too) and Python's streams go to the rank's
    log: in a forked notebook kernel they would otherwise forward into the cell."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115


def sender(conn: Any) -> Callable[[str, Any], None]:
    """``send(kind, payload)`` over ``conn``, safe from several threads of one rank."""
    lock = threading.Lock()

    def send(kind: str, payload: Any) -> None:
        with lock:
            conn.send((kind, payload))

    return send


def run_worker(
    worker: Callable[..., Any],
    ctx: RankContext,
    store_path: str,
    timeout_s: float,
    args: tuple,
    kwargs: dict,
) -> Any:
    """The rank's lifecycle, the same in a child and in-process: threads, process group, the
    worker, and teardown of the process group and the thread setting, always."""
    with torch_threads(ctx.threads):
        try:
            if ctx.backend != "none":
                init_process_group(ctx, store_path, timeout_s)
            value = worker(ctx, *args, **kwargs)
            leave_together(ctx)
            return value
        finally:
            with contextlib.suppress(Exception):  # a broken group must not hide the real error
                destroy_process_group()


def child_main(
    payload: Any,
    ctx: RankContext,
    store_path: str,
    timeout_s: float,
    log_path: str,
    conn: Any,
) -> None:
    """Entry point of a rank process: run the worker, send its result or its failure home.

    ``payload.load()`` gives ``(worker, args, kwargs)``; with spawn or forkserver it unpickles
    them here, inside the ``try``, so a module this process cannot import is reported as this
    rank's error (:class:`hpclab.dist.start.Payload`).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when ranks stop
    rank_process_setup(ctx.rank)
    if ctx.cpus and hasattr(
        os, "sched_setaffinity"
    ):  # before any thread pool exists: OpenMP's threads inherit the mask
        os.sched_setaffinity(0, ctx.cpus)
    _own_output(log_path)
    send = sender(conn)
    failed_at: list[float] = []

    def timed(*a: Any, **kw: Any) -> Any:
        try:
            return worker(*a, **kw)
        except BaseException:
            # When it raised, before teardown: one clock for every process on Linux, so the
            # parent can tell which rank failed first.
            failed_at.append(time.monotonic())
            raise

    try:
        try:
            worker, args, kwargs = payload.load()
        except Exception as exc:
            raise ImportError(
                f"the rank could not load its worker or arguments ({type(exc).__name__}: {exc}); "
                "with spawn or forkserver they must be importable from a module on sys.path"
            ) from exc
        value = run_worker(
            timed, dataclasses.replace(ctx, send=send), store_path, timeout_s, args, kwargs
        )
        send("result", pickle.dumps(value))  # fails here, in the rank, if it cannot travel
    except BaseException as exc:  # noqa: BLE001 - everything must reach the parent
        at = failed_at[0] if failed_at else time.monotonic()
        summary = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
        try:
            send("error", (summary, traceback.format_exc(), is_peer_loss(exc), at))
        except OSError:
            pass  # the parent is gone
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        conn.close()
