"""Where work runs: one decision of devices, backend and threads for every experiment (ch. 00).

:func:`place` is the only place that decides. It answers for a number of ranks (one for a
single-process experiment) and a requested ``device``:

- ``"auto"`` means **one GPU per rank when there are at least as many GPUs as ranks, otherwise
  CPU ranks** talking over gloo, standing in for GPUs. The same meaning for ``ddp``,
  ``allreduce``, the data-loading runs and the launcher; :attr:`Placement.note` says in one
  sentence what was chosen and why, so a CPU stand-in is never silent.
- ``"cuda"`` insists on one GPU per rank and refuses, in one line, when there are fewer.
- ``"cpu"`` is CPU ranks, even on a GPU node.

Device names, one vocabulary across the library: a *request* says ``"auto"``, ``"cpu"`` or
``"cuda"`` (chapter 01 compares the CPU and every GPU with an option of its own,
``compare_devices``, not a device word); where work *ran* is a torch device
string, ``"cpu"`` or ``"cuda:N"``: :attr:`Placement.devices`, ``RankContext.device`` and the
``device`` field of every record (rank 0's device for a multi-rank run). A refusal names the
request and what is visible: "device='cuda' needs one GPU per rank: ranks=2 but 1 GPU(s) are
visible".

Threads: each rank gets ``usable cores // ranks`` intra-op threads (at least one). Given
``cpus`` (a set of core ids, e.g. one of several candidates benchmarked side by side in chapter
08), the run is pinned: they are split into one disjoint, consecutive slice per rank, each rank
process (and what it starts, e.g. DataLoader workers) is bound to its slice with
``os.sched_setaffinity``, and "usable cores" means ``len(cpus)``. More CPU ranks
than ``OVERSUBSCRIBE_LIMIT`` x usable cores are refused: such a run measures the scheduler.
:func:`torch_threads` is the one way the library sets a thread count (ranks, chapter 01's
thread sweeps, single-threaded workers): for a block, restored afterwards.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from hpclab.config import ConfigError
from hpclab.environ import environ
from hpclab.measure.sysinfo import usable_cores, usable_cpu_ids

DEVICES = ("auto", "cpu", "cuda")
BACKENDS = ("auto", "none", "gloo", "nccl")
# More busy processes (or threads) than 4 per usable core measure the OS scheduler, not the
# method (chapter 05's Hogwild and parameter-server runs, chapter 06's CPU ranks).
OVERSUBSCRIBE_LIMIT = 4
_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


class LaunchError(ConfigError):
    """The run cannot start as asked (ranks, device, backend, start method): one line, what to
    do instead. A :class:`~hpclab.config.ConfigError`, so the CLI exits 2 and panels say it."""


def gpu_count() -> int:
    """Visible GPUs. NVML-based in torch: it does not initialise CUDA, so forking stays safe."""
    import torch

    return torch.cuda.device_count()


@dataclass(frozen=True)
class Placement:
    """The decision: ``devices[r]`` is rank r's device; ``note`` says why, in one sentence."""

    ranks: int
    device: str  # "cpu" or "cuda"
    devices: tuple[str, ...]  # "cpu" or "cuda:N", one per rank
    backend: str  # "none", "gloo" or "nccl"
    threads: int  # intra-op threads per rank
    note: str
    cpus: tuple[tuple[int, ...], ...] = ()  # per rank: the cores it is pinned to (() = unpinned)

    def pin_memory(self, requested: bool = True) -> tuple[bool, str]:
        """Whether a DataLoader feeding these ranks may pin its batches, and if not, why
        (chapter 04). Pinned (page-locked) host memory lets a copy to a GPU run asynchronously
        (chapter 02). It needs a CUDA build of PyTorch and a GPU: a CPU build raises on
        ``pin_memory=True``, and with ranks on the CPU nothing is copied to a GPU."""
        import torch

        if not requested:
            return False, ""
        if self.device != "cuda":
            why = "these ranks run on the CPU, so no batch is copied to a GPU"
            if torch.version.cuda is None:
                why = "this PyTorch build has no CUDA (pinning needs it)"
            return False, f"pin_memory=True not possible here: {why}; loading unpinned"
        return True, ""


def _too_few_gpus(ranks: int, gpus: int) -> str:
    if ranks == 1:
        return "device='cuda' needs a GPU but no GPU is visible here; allowed: device='cpu'"
    have = f"{gpus} GPU(s) are visible" if gpus else "no GPU is visible here"
    fewer = f"ranks 1..{gpus} on GPUs, or " if gpus else ""
    return (
        f"device='cuda' needs one GPU per rank: ranks={ranks} but {have}; allowed: {fewer}"
        "device='auto' or 'cpu' (CPU ranks on gloo stand in for GPUs)"
    )


def place(
    ranks: int,
    device: str = "auto",
    backend: str = "auto",
    *,
    threads: int | None = None,
    gpus: int | None = None,
    cores: int | None = None,
    cpus: Sequence[int] | None = None,
) -> Placement:
    """Decide devices, backend and threads for ``ranks`` ranks; raise :class:`LaunchError`.

    ``gpus`` and ``cores`` default to what this allocation has; pass them to ask "what would
    happen on a node with 4 GPUs". ``cpus`` pins the ranks (see the module's docstring); they
    must be cores this process may use, at least one per rank. ``backend="none"`` runs the
    ranks without a process group (independent processes sharing tensors, chapter 05); one rank
    with ``"auto"`` needs none.
    """
    if not isinstance(ranks, int) or isinstance(ranks, bool) or ranks < 1:
        raise LaunchError(f"ranks={ranks!r} must be a whole number >= 1")
    if device not in DEVICES:
        raise LaunchError(f"device={device!r} is not allowed; allowed: {', '.join(DEVICES)}")
    if backend not in BACKENDS:
        raise LaunchError(f"backend={backend!r} is not allowed; allowed: {', '.join(BACKENDS)}")
    gpus = gpu_count() if gpus is None else gpus
    slices: tuple[tuple[int, ...], ...] = ()
    if cpus is not None:
        slices = rank_cores(cpus, ranks)
        cores = len(set(cpus))
    cores = usable_cores() if cores is None else cores
    if device == "auto":
        device = "cuda" if backend != "gloo" and 0 < ranks <= gpus else "cpu"
    if device == "cuda" and gpus < ranks:
        raise LaunchError(_too_few_gpus(ranks, gpus))
    if backend == "nccl" and device != "cuda":
        raise LaunchError(
            "backend='nccl' needs one GPU per rank (device='cuda'); allowed on CPU: gloo, none"
        )
    if device == "cpu" and ranks > OVERSUBSCRIBE_LIMIT * cores:
        raise LaunchError(
            f"ranks={ranks} CPU processes exceed {OVERSUBSCRIBE_LIMIT} x the {cores} usable "
            f"core(s) of this allocation; allowed: 1..{OVERSUBSCRIBE_LIMIT * cores} CPU ranks"
        )
    if backend == "auto":
        backend = "none" if ranks == 1 else ("nccl" if device == "cuda" else "gloo")
    threads = threads or max(1, cores // ranks)
    devices = tuple(f"cuda:{r}" for r in range(ranks)) if device == "cuda" else ("cpu",) * ranks
    return Placement(
        ranks,
        device,
        devices,
        backend,
        threads,
        _note(ranks, device, backend, threads, gpus, cores),
        slices,
    )


def rank_cores(
    cpus: Sequence[int], ranks: int, allowed: set[int] | None = None
) -> tuple[tuple[int, ...], ...]:
    """Split ``cpus`` into ``ranks`` disjoint consecutive slices of ``len(cpus) // ranks`` cores
    (a remainder stays unused); refuse cores outside ``allowed`` (default: those this process
    may use) or fewer than one a rank."""
    cpus = tuple(sorted(set(cpus)))
    if allowed is None:
        allowed = set(usable_cpu_ids())
    if not cpus or not set(cpus) <= allowed:
        raise LaunchError(
            f"cpus={list(cpus)} must be a non-empty set of the cores this process may use; "
            f"allowed: a subset of {sorted(allowed)}"
        )
    if len(cpus) < ranks:
        raise LaunchError(
            f"cpus={list(cpus)} gives {len(cpus)} core(s) for ranks={ranks}; allowed: at least "
            "one core per rank"
        )
    k = len(cpus) // ranks
    return tuple(cpus[r * k : (r + 1) * k] for r in range(ranks))


def _note(ranks: int, device: str, backend: str, threads: int, gpus: int, cores: int) -> str:
    who = "1 rank" if ranks == 1 else f"{ranks} ranks"
    via = "" if backend == "none" else f" ({backend})"
    if device == "cuda":
        return f"{who} on {ranks} of {gpus} GPU(s){via}, {threads} CPU thread(s) each"
    if gpus == 0:
        why = "no GPU is visible"
    elif gpus < ranks:
        why = (
            f"{gpus} GPU(s) visible, fewer than one per rank (ranks cannot share a GPU: NCCL "
            "refuses two ranks on one device)"
        )
    else:
        why = "device='cpu' asked"
    text = f"{who} on CPU{via}: {why}; {threads} thread(s) each of {cores} usable core(s)"
    if ranks * threads > cores:
        text += f"; {ranks * threads} threads share {cores} core(s), so times run slower"
    return text


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[int]:
    """Run a block with ``n`` intra-op threads (0: every usable core); restore the old setting.

    Sets PyTorch's pool and ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` (read by processes this
    block starts). Call it *inside* the work: a widget runs in a background thread, and the
    OpenMP pool size is a per-thread setting.
    """
    import torch

    n = n or usable_cores()
    old = torch.get_num_threads()
    with environ(dict.fromkeys(_THREAD_VARS, str(n))):
        torch.set_num_threads(n)
        try:
            yield n
        finally:
            torch.set_num_threads(old)
