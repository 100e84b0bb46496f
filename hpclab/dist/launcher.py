"""Start N ranks of a worker and bring their results back (chapter 00; used in chapters 05-06).

The contract (DESIGN.md, "Launching ranks"), and how it is kept:

- **No fixed port.** Ranks meet through a ``FileStore`` in the run's own temporary directory:
  no port to choose, so two launches on one node (two students, or two cells) cannot collide.
  gloo then connects the ranks over loopback on ports the kernel picks. A file, not a
  ``TCPStore``, also keeps name resolution out of the rendezvous: PyTorch's TCP store looks up
  the host name of every connecting peer (``::ffff:127.0.0.1``), and where DNS drops a query that
  lookup blocks the store for 5 s (seen on the sandboxes this course is tested on: about one
  lookup in a hundred, enough to fail one 2-rank launch in twenty).
- **Backend.** NCCL when each rank owns a GPU, gloo otherwise; one rank with ``backend="auto"``
  runs without a process group at all, and ``backend="none"`` asks for that with any number of
  ranks (independent processes sharing tensors, e.g. Hogwild in chapter 05).
- **Short timeout.** The process-group timeout is seconds, not PyTorch's 30-minute default.
- **Threads.** Each rank gets ``usable cores // ranks`` intra-op threads.
- **Quiet children.** A rank's stdout/stderr (also C-level output) go to a log file; a failing
  rank's log tail is attached to the error. Nothing is printed into the notebook cell.
- **Fast failure.** The first rank to raise stops the run: the others are killed and the parent
  raises one :class:`RankError` naming the rank, with its traceback.
- **No orphans.** Every child (and its own children, e.g. DataLoader workers) is killed in a
  ``finally``; children also die with the parent (``PR_SET_PDEATHSIG``). Ctrl-C or a kernel
  interrupt reaches the parent's wait loop and stops everything.
- **fork where safe.** fork starts a rank in ~0.05 s and runs workers defined in a notebook;
  it is refused after CUDA was initialised in this process (CUDA does not survive fork).
"""

from __future__ import annotations

import ctypes
import os
import pickle
import queue as queue_mod
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from hpclab.dist.context import RankContext, destroy_process_group, init_process_group, set_threads
from hpclab.dist.reap import kill_tree
from hpclab.progress import Progress


class LaunchError(RuntimeError):
    """The run could not start (bad world size, no GPUs, unsafe fork): one line, what to do."""


class RankError(RuntimeError):
    """A rank failed; carries the rank, its traceback and the tail of its output."""

    def __init__(self, rank: int, world_size: int, summary: str, tb: str, log_tail: str = ""):
        self.rank = rank
        self.world_size = world_size
        self.summary = summary
        self.traceback = tb
        self.log_tail = log_tail
        text = f"rank {rank} of {world_size} failed: {summary}"
        if tb:
            text += f"\n--- traceback of rank {rank} ---\n{tb.rstrip()}"
        if log_tail:
            text += f"\n--- last output of rank {rank} ---\n{log_tail.rstrip()}"
        super().__init__(text)


class LaunchTimeout(RankError):
    """The whole run outlived its deadline."""


def _usable_cores() -> int:
    from hpclab.measure.sysinfo import usable_cores

    return usable_cores()[0]


def _cuda_initialized() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def choose_backend(world_size: int, backend: str, device: str) -> tuple[str, list[str]]:
    """Resolve ``backend``/``device`` ("auto" allowed) to a backend and one device per rank."""
    import torch

    gpus = torch.cuda.device_count()  # NVML-based: does not initialise CUDA
    if device == "auto":
        device = "cuda" if gpus >= world_size and gpus > 0 else "cpu"
    if device == "cuda":
        if gpus < world_size:
            raise LaunchError(
                f"ranks={world_size} need one GPU each but {gpus} GPU(s) are visible; "
                f"use at most {gpus} ranks on GPUs, or device='cpu' (gloo) to simulate"
            )
        devices = [f"cuda:{r}" for r in range(world_size)]
    elif device == "cpu":
        devices = ["cpu"] * world_size
    else:
        raise LaunchError(f"device={device!r} is not allowed; allowed: auto, cpu, cuda")
    if backend == "auto":
        if world_size == 1:
            backend = "none"
        else:
            backend = "nccl" if device == "cuda" else "gloo"
    if backend not in ("none", "gloo", "nccl"):
        raise LaunchError(f"backend={backend!r} is not allowed; allowed: auto, none, gloo, nccl")
    if backend == "nccl" and device != "cuda":
        raise LaunchError("backend='nccl' needs device='cuda' with one GPU per rank")
    # backend="none" with several ranks: independent processes and no process group, asked for
    # explicitly (Hogwild's shared-memory workers in chapter 05 talk through shared tensors).
    return backend, devices


def _set_parent_death_signal() -> None:
    """Linux: die with the parent, so a killed kernel leaves no rank behind."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def _child_main(
    worker: Callable[..., Any],
    ctx: RankContext,
    store_path: str,
    timeout_s: float,
    log_path: str,
    results: Any,
    args: tuple,
    kwargs: dict,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when ranks stop
    _set_parent_death_signal()
    # Own the output: fds 1 and 2 (C-level output from gloo/NCCL too) and Python's streams,
    # which in a forked notebook kernel would otherwise forward into the cell.
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    ctx._queue = results
    try:
        set_threads(ctx.threads)
        if ctx.backend != "none":
            init_process_group(ctx, store_path, timeout_s)
        value = worker(ctx, *args, **kwargs)
        payload = pickle.dumps(value)  # fail here, in the rank, if the result cannot travel
        results.put(("result", ctx.rank, payload))
    except BaseException as exc:  # noqa: BLE001 - everything must reach the parent
        summary = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
        results.put(("error", ctx.rank, (summary, traceback.format_exc())))
    finally:
        try:
            destroy_process_group()
        except Exception:  # noqa: BLE001
            pass
        sys.stdout.flush()
        sys.stderr.flush()
        results.close()
        results.join_thread()


def _kill_tree(procs: list[Any]) -> None:
    """Stop every rank and everything it started (e.g. DataLoader workers); reap them."""
    kill_tree([p.pid for p in procs if p.pid is not None])
    for p in procs:
        p.join(timeout=1.0)


def _tail(path: str, lines: int = 20) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def _exit_summary(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code} before returning a result"


def _start(procs: list[Any], start_method: str) -> threading.Event:
    """Start the ranks; with fork, from a fresh thread that lives until the returned event is
    set (set it after the ranks are gone).

    GNU OpenMP (libgomp, behind PyTorch's CPU GEMMs) keeps its worker pool per OS thread and
    has no fork handler: a child forked from a thread that already ran a multi-threaded kernel
    inherits a pool whose threads do not exist, and its first parallel GEMM waits forever
    (seen here: parent GEMM with 2 threads, then a rank with 2 threads hangs in
    ``gomp_team_barrier_wait_end``). A child forked from a new thread starts with no pool.
    The thread must outlive the ranks: ``PR_SET_PDEATHSIG`` fires when the *thread* that
    forked a child exits, not only the process.
    """
    release = threading.Event()
    if start_method != "fork":
        for p in procs:
            p.start()
        release.set()
        return release
    started = threading.Event()
    errors: list[BaseException] = []

    def start_all() -> None:
        try:
            for p in procs:
                p.start()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(exc)
        started.set()
        release.wait()

    threading.Thread(target=start_all, name="hpclab-fork", daemon=True).start()
    started.wait()
    if errors:
        release.set()
        raise errors[0]
    return release


def launch(
    worker: Callable[..., Any],
    world_size: int,
    *,
    args: tuple = (),
    kwargs: dict | None = None,
    backend: str = "auto",
    device: str = "auto",
    timeout_s: float = 30.0,
    deadline_s: float | None = None,
    threads_per_rank: int | None = None,
    start_method: str = "auto",
    progress: Progress | None = None,
) -> list[Any]:
    """Run ``worker(ctx, *args, **kwargs)`` on ``world_size`` ranks; return results by rank.

    ``timeout_s`` is the process-group timeout (a collective waiting for a hung peer fails
    after it); ``deadline_s`` bounds the whole run from the parent's side. Raises
    :class:`RankError` naming the first failing rank, :class:`LaunchError` for a run that
    cannot start, and :class:`hpclab.progress.Cancelled` when cancelled.
    """
    import multiprocessing as mp

    if not isinstance(world_size, int) or world_size < 1:
        raise LaunchError(f"world_size={world_size!r} must be a whole number >= 1")
    if timeout_s <= 0:
        raise LaunchError(f"timeout_s={timeout_s!r} must be > 0")
    backend, devices = choose_backend(world_size, backend, device)
    threads = threads_per_rank or max(1, _usable_cores() // world_size)

    if start_method == "auto":
        start_method = "spawn" if _cuda_initialized() else "fork"
    if start_method == "fork" and _cuda_initialized():
        raise LaunchError(
            "cannot fork ranks: CUDA is already initialised in this process and does not survive "
            "fork; restart the kernel and launch before touching the GPU, or use "
            "start_method='spawn' with a worker defined in an importable module"
        )
    if start_method == "spawn" and getattr(worker, "__module__", "") == "__main__":
        raise LaunchError(
            f"worker {getattr(worker, '__name__', worker)!r} is defined in the notebook/script; "
            "spawn cannot import it: move it into a .py module or use start_method='fork'"
        )
    if start_method not in mp.get_all_start_methods():
        raise LaunchError(f"start_method={start_method!r} is not available on this system")
    mpctx = mp.get_context(start_method)
    progress = progress or Progress()

    logdir = tempfile.mkdtemp(prefix="hpclab-ranks-")
    store_path = os.path.join(logdir, "store")
    results_q = mpctx.Queue()
    procs: list[Any] = []
    release: threading.Event | None = None
    outputs: list[Any] = [None] * world_size
    done: set[int] = set()
    started = time.monotonic()
    try:
        for rank in range(world_size):
            ctx = RankContext(rank, world_size, backend, devices[rank], threads)
            log_path = os.path.join(logdir, f"rank{rank}.log")
            p = mpctx.Process(
                target=_child_main,
                args=(worker, ctx, store_path, timeout_s, log_path, results_q, args, kwargs or {}),
                name=f"hpclab-rank{rank}",
            )
            procs.append(p)
        release = _start(procs, start_method)

        dead_since: dict[int, float] = {}
        while len(done) < world_size:
            try:
                kind, rank, payload = results_q.get(timeout=0.05)
            except queue_mod.Empty:
                progress.check()
                now = time.monotonic()
                if deadline_s is not None and now - started > deadline_s:
                    late = [r for r in range(world_size) if r not in done]
                    raise LaunchTimeout(
                        late[0],
                        world_size,
                        f"run exceeded deadline_s={deadline_s:g}; ranks {late} had not finished",
                        "",
                        _tail(os.path.join(logdir, f"rank{late[0]}.log")),
                    ) from None
                for r, p in enumerate(procs):
                    if r in done or p.exitcode is None:
                        continue
                    # Exited without a message yet: allow the queue a moment to deliver it.
                    first = dead_since.setdefault(r, now)
                    if now - first > 1.0:
                        raise RankError(
                            r,
                            world_size,
                            _exit_summary(p.exitcode),
                            "",
                            _tail(os.path.join(logdir, f"rank{r}.log")),
                        ) from None
                continue
            if kind == "progress":
                if rank == 0:
                    progress.update(*payload)
                else:
                    progress.check()
            elif kind == "result":
                outputs[rank] = pickle.loads(payload)
                done.add(rank)
            elif kind == "error":
                summary, tb = payload
                running = [
                    r for r, p in enumerate(procs) if r != rank and r not in done and p.is_alive()
                ]
                if running:
                    summary += f" (ranks still running then: {running})"
                raise RankError(
                    rank, world_size, summary, tb, _tail(os.path.join(logdir, f"rank{rank}.log"))
                )
        return outputs
    finally:
        _kill_tree(procs)
        if release is not None:
            release.set()
        results_q.close()
        results_q.cancel_join_thread()
        shutil.rmtree(logdir, ignore_errors=True)
