"""Start N ranks of a worker and bring their results back (chapter 00; used in chapters 05-06).

The contract (DESIGN.md, "Launching ranks"), and how it is kept:

- **No fixed port.** Ranks meet through a ``FileStore`` in the run's own temporary directory:
  no port to choose, so two launches on one node (two students, or two cells) cannot collide.
  gloo then connects the ranks over loopback on ports the kernel picks. A file, not a
  ``TCPStore``, also keeps name resolution out of the rendezvous: PyTorch's TCP store looks up
  the host name of every connecting peer (``::ffff:127.0.0.1``), and where DNS drops a query that
  lookup blocks the store for 5 s (seen on the sandboxes this course is tested on: about one
  lookup in a hundred, enough to fail one 2-rank launch in twenty).
- **Placement.** :func:`hpclab.dist.placement.place` decides devices, backend and threads, the
  same way for every experiment: NCCL when each rank owns a GPU, gloo otherwise; one rank with
  ``backend="auto"`` runs without a process group, and ``backend="none"`` asks for that with
  any number of ranks (independent processes sharing tensors, e.g. Hogwild in chapter 05).
  Each rank gets ``usable cores // ranks`` intra-op threads.
- **Short timeout.** The process-group timeout is seconds, not PyTorch's 30-minute default.
- **Quiet children.** A rank's stdout/stderr (also C-level output) go to a log file; a failing
  rank's log tail is attached to the error. Nothing is printed into the notebook cell.
- **Cause first.** When a rank fails, the launcher gathers the other ranks' fate for at most
  ``SETTLE_S`` (a peer's "Connection closed" follows within a fraction of a second), stops
  the rest and raises one :class:`RankError` whose first line is the root cause (the rank killed
  by a signal, the one that exited, the one that raised, or the one that hung), with that rank's
  traceback, then each other rank in one line (:mod:`hpclab.dist.failures`).
- **No orphans.** Every child (and its own children, e.g. DataLoader workers) is killed in a
  ``finally``; children also die with the parent (``PR_SET_PDEATHSIG``). Ctrl-C or a kernel
  interrupt reaches the parent's wait loop and stops everything.
- **fork where safe.** :func:`hpclab.dist.start.start_method` is the one policy: fork where no
  GPU is visible (~0.05 s a rank, notebook workers run), forkserver where one is (after a
  backward pass on a GPU machine, forked children cannot run autograd); fork is refused once
  CUDA is initialised here. With spawn or forkserver the worker and its arguments are
  unpickled inside the rank, after its log is set up: a worker whose module the child cannot
  import fails as that rank's error, naming the module, not as a bare exit code.
- **Debugging a worker.** ``launch(worker, 1, inprocess=True)`` runs the one rank in the
  calling process, with the same :class:`RankContext`, threads, process group (if a backend is
  asked for) and teardown: breakpoints and ``%debug`` work, and its exception is raised as is.
"""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait
from typing import Any

from hpclab.dist.child import child_main, run_worker
from hpclab.dist.context import RankContext
from hpclab.dist.failures import Failure, LaunchTimeout, RankError, diagnose
from hpclab.dist.placement import LaunchError, Placement, place
from hpclab.dist.reap import kill_tree
from hpclab.dist.start import Payload, start_context
from hpclab.measure.oom import OomWatch
from hpclab.progress import Progress

__all__ = ["LaunchError", "LaunchTimeout", "RankError", "launch"]

# After the first failure, how long to wait for the other ranks' fate before stopping them: a
# peer of a crashed rank fails within ~0.3 s (DESIGN.md, measured facts); one that computes
# outside a collective would only notice at its next one, so it is stopped instead.
SETTLE_S = 1.0


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
    inprocess: bool = False,
    cpus: Sequence[int] | None = None,
) -> list[Any]:
    """Run ``worker(ctx, *args, **kwargs)`` on ``world_size`` ranks; return results by rank.

    ``timeout_s`` is the process-group timeout (a collective waiting for a hung peer fails
    after it); ``deadline_s`` bounds the whole run from the parent's side. ``inprocess=True``
    runs a one-rank run in this process, for debugging the worker. ``cpus`` pins the ranks to
    disjoint slices of these cores (:func:`hpclab.dist.placement.place`). Raises :class:`RankError`
    (root cause first), :class:`LaunchError` for a run that cannot start, and
    :class:`hpclab.progress.Cancelled` when cancelled.
    """
    if not isinstance(world_size, int) or world_size < 1:
        raise LaunchError(f"world_size={world_size!r} must be a whole number >= 1")
    if timeout_s <= 0:
        raise LaunchError(f"timeout_s={timeout_s!r} must be > 0")
    where = place(world_size, device, backend, threads=threads_per_rank, cpus=cpus)
    progress = progress or Progress()
    if inprocess and where.cpus:
        raise LaunchError("cpus= pins rank processes; inprocess=True runs none: leave cpus out")
    if inprocess:
        return [_run_inprocess(worker, where, timeout_s, args, kwargs or {}, progress)]
    ranks = _Ranks(where, start_context(worker, start_method), timeout_s)
    try:
        ranks.start(worker, args, kwargs or {})
        return ranks.supervise(progress, deadline_s)
    finally:
        ranks.stop()


def _run_inprocess(
    worker: Callable[..., Any],
    where: Placement,
    timeout_s: float,
    args: tuple,
    kwargs: dict,
    progress: Progress,
) -> Any:
    """One rank in this process: same context, threads and teardown; exceptions as they are."""
    if where.ranks != 1:
        raise LaunchError(
            f"inprocess=True runs one rank in this process; world_size={where.ranks} needs "
            "separate processes: debug with world_size=1 (a backend such as 'gloo' still "
            "gives it a process group)"
        )

    def send(kind: str, payload: Any) -> None:
        progress.update(*payload)

    ctx = RankContext(0, 1, where.backend, where.devices[0], where.threads, send=send)
    store_dir = tempfile.mkdtemp(prefix="hpclab-ranks-")
    try:
        value = run_worker(worker, ctx, os.path.join(store_dir, "store"), timeout_s, args, kwargs)
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)
    return pickle.loads(pickle.dumps(value))  # what a rank process would hand back: a copy


class _Ranks:
    """The processes of one run: start, watch, stop. Their logs and store live in one temp dir."""

    def __init__(self, where: Placement, mpctx: Any, timeout_s: float) -> None:
        self.where, self.mpctx, self.timeout_s = where, mpctx, timeout_s
        self.n = where.ranks
        self.logdir = tempfile.mkdtemp(prefix="hpclab-ranks-")
        self.procs: list[Any] = []
        self.conns: dict[int, Any] = {}  # rank -> the parent's end of its pipe, while open
        self.release: threading.Event | None = None
        self.results: dict[int, Any] = {}
        self.failures: dict[int, Failure] = {}
        self.exited: set[int] = set()
        self.oom = OomWatch()  # before any rank starts: a rank's SIGKILL is checked against it

    def log(self, rank: int) -> str:
        return os.path.join(self.logdir, f"rank{rank}.log")

    def tail(self, rank: int, lines: int = 20) -> str:
        try:
            with open(self.log(rank), errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    # -- start ----------------------------------------------------------------------------
    def start(self, worker: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        """Start every rank. With fork, from a fresh thread that lives until :meth:`stop`.

        GNU OpenMP (libgomp, behind PyTorch's CPU GEMMs) keeps its worker pool per OS thread
        and has no fork handler: a child forked from a thread that already ran a multi-threaded
        kernel inherits a pool whose threads do not exist, and its first parallel GEMM waits
        forever (seen here: parent GEMM with 2 threads, then a rank with 2 threads hangs in
        ``gomp_team_barrier_wait_end``). A child forked from a new thread starts with no pool.
        The thread must outlive the ranks: ``PR_SET_PDEATHSIG`` fires when the *thread* that
        forked a child exits, not only the process.
        """

        def start_all() -> None:
            for rank in range(self.n):
                self._start_rank(rank, worker, args, kwargs)

        self.release = threading.Event()
        if self.mpctx.get_start_method() != "fork":
            start_all()
            return
        started = threading.Event()
        errors: list[BaseException] = []

        def fork_thread() -> None:
            try:
                start_all()
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                errors.append(exc)
            started.set()
            self.release.wait()

        threading.Thread(target=fork_thread, name="hpclab-fork", daemon=True).start()
        started.wait()
        if errors:
            raise errors[0]

    def _start_rank(self, rank: int, worker: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        """Start one rank process, with the parent's end of its result pipe kept in ``conns``."""
        # One pipe per rank, made just before its start: a later rank inherits no writer of an
        # earlier one, so a dead rank's pipe reads as closed.
        reader, writer = self.mpctx.Pipe(duplex=False)
        ctx = RankContext(
            rank,
            self.n,
            self.where.backend,
            self.where.devices[rank],
            self.where.threads,
            cpus=self.where.cpus[rank] if self.where.cpus else (),
        )
        payload = Payload((worker, args, kwargs))
        store = os.path.join(self.logdir, "store")
        p = self.mpctx.Process(
            target=child_main,
            args=(payload, ctx, store, self.timeout_s, self.log(rank), writer),
            name=f"hpclab-rank{rank}",
        )
        try:
            p.start()
        except Exception as exc:
            reader.close()
            writer.close()
            raise self._unstartable(rank, worker, exc) from exc
        self.procs.append(p)  # only started processes: stop() joins each of them
        writer.close()
        self.conns[rank] = reader

    def _unstartable(self, rank: int, worker: Callable[..., Any], exc: Exception) -> LaunchError:
        """Why rank ``rank`` could not start, in one line with what to do instead."""
        method = self.mpctx.get_start_method()
        name = getattr(worker, "__qualname__", repr(worker))
        why = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
        return LaunchError(
            f"rank {rank} could not be started with {method}: "
            f"{type(exc).__name__}: {why} (worker {name!r} and its arguments must "
            "be picklable, and a script must start ranks under "
            "`if __name__ == '__main__':`; define the worker at the top level of an "
            "importable .py module)"
        )

    # -- watch ----------------------------------------------------------------------------
    def supervise(self, progress: Progress, deadline_s: float | None) -> list[Any]:
        """Wait for every result; on the first failure, settle, stop, and raise cause first."""
        begun = time.monotonic()
        settle_until: float | None = None
        while len(self.results) < self.n:
            sentinels = {p.sentinel: r for r, p in enumerate(self.procs) if r not in self.exited}
            ready = wait([*self.conns.values(), *sentinels], timeout=0.05)
            for rank, conn in list(self.conns.items()):
                if conn in ready:
                    self._receive(rank, conn, progress)
            for s in ready:
                if s in sentinels:
                    self._exited(sentinels[s], progress)
            now = time.monotonic()
            if self.failures:
                settle_until = settle_until or now + SETTLE_S
                accounted = set(self.results) | set(self.failures) | self.exited
                if len(accounted) == self.n or now > settle_until:
                    raise self._diagnose()
            progress.check()
            if deadline_s is not None and now - begun > deadline_s:
                late = [r for r in range(self.n) if r not in self.results]
                raise LaunchTimeout(
                    late[0],
                    self.n,
                    f"run exceeded deadline_s={deadline_s:g}; ranks {late} had not finished",
                    "",
                    self.tail(late[0]),
                ) from None
        return [self.results[r] for r in range(self.n)]

    def _receive(self, rank: int, conn: Any, progress: Progress) -> None:
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError):  # the rank closed its pipe (or died mid-message)
            del self.conns[rank]
            return
        if kind == "progress":
            if rank == 0:
                progress.update(*payload)
        elif kind == "result":
            self.results[rank] = pickle.loads(payload)
        elif kind == "error":
            summary, tb, peer_loss, at = payload
            self.failures[rank] = Failure(rank, at, summary, tb, peer_loss=peer_loss)

    def _exited(self, rank: int, progress: Progress) -> None:
        """A rank's process ended: read what it sent last, then judge its exit."""
        at = time.monotonic()
        conn = self.conns.get(rank)
        while conn is not None and rank in self.conns and conn.poll():
            self._receive(rank, conn, progress)
        self.exited.add(rank)
        if rank not in self.results and rank not in self.failures:
            self.procs[rank].join(timeout=1.0)  # the sentinel closes a moment before the reap
            code = self.procs[rank].exitcode
            killer = self.oom.verdict() if code == -signal.SIGKILL else ""
            self.failures[rank] = Failure(rank, at, exitcode=code or 0, killer=killer)

    def _diagnose(self) -> RankError:
        running = [r for r in range(self.n) if r not in self.failures and r not in self.results]
        self._kill()  # stop the rest before composing the report: nothing else happens now
        return diagnose(
            list(self.failures.values()),
            self.n,
            running,
            sorted(self.results),
            self.timeout_s,
            self.tail,
        )

    # -- stop -----------------------------------------------------------------------------
    def _kill(self) -> None:
        """Stop every rank and everything it started (e.g. DataLoader workers); reap them."""
        kill_tree([p.pid for p in self.procs if p.pid is not None])
        for p in self.procs:
            p.join(timeout=1.0)

    def stop(self) -> None:
        """Kill what is left, let the fork thread go, remove the run's temp dir."""
        self._kill()
        if self.release is not None:
            self.release.set()
        for conn in self.conns.values():
            conn.close()
        self.conns.clear()
        shutil.rmtree(self.logdir, ignore_errors=True)
