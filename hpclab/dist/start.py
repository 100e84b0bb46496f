"""How rank processes start, and how a worker travels into them (chapter 05 says why it matters).

fork starts a rank in ~0.05 s and runs workers defined in a notebook, but it is not always safe:
CUDA does not survive fork, and on a machine with a GPU, once a process has run a backward
pass, the children it forks cannot run autograd ("Unable to handle autograd's threading in
combination with fork-based multiprocessing": the autograd engine keeps one thread per GPU,
which a forked child does not have). :func:`start_method` is the one policy.
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import sys
from collections.abc import Callable
from typing import Any

from hpclab.dist.placement import LaunchError

# Imported once by the forkserver, inherited by every rank it forks (it never runs autograd).
FORKSERVER_PRELOAD = ["torch", "torch._dynamo", "hpclab.dist.child", "hpclab.train"]


def _cuda_initialized() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def _in_main(worker: Callable[..., Any]) -> bool:
    """Defined in the notebook or the script run as __main__: only fork can run it."""
    return getattr(worker, "__module__", "") in ("__main__", "__mp_main__")


def start_method(worker: Callable[..., Any] | None = None, requested: str = "auto") -> str:
    """How ranks are started (chapter 05 says why it matters); the one policy, used by
    :func:`launch` and by callers that make locks or barriers for the ranks.

    ``"auto"``: fork when no GPU is visible (as fast as it gets, notebook workers run);
    forkserver when CUDA is initialised here, or when a GPU is visible and the worker is
    importable: a process forked from one that ran a backward pass on a GPU machine cannot run
    autograd. A worker defined in the notebook can only be forked: it keeps fork until CUDA is
    initialised. An explicit ``requested`` method is checked and returned.
    """
    from hpclab.dist.placement import gpu_count

    if requested == "auto":
        if _cuda_initialized() or (gpu_count() > 0 and not _in_main(worker)):
            requested = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        else:
            requested = "fork"
    if requested not in mp.get_all_start_methods():
        raise LaunchError(f"start_method={requested!r} is not available on this system")
    if requested == "fork" and _cuda_initialized():
        raise LaunchError(
            "cannot fork ranks: CUDA is already initialised in this process and does not survive "
            "fork; restart the kernel and launch before touching the GPU, or use "
            "start_method='spawn' with a worker defined in an importable module"
        )
    if requested != "fork" and worker is not None and _in_main(worker):
        raise LaunchError(
            f"worker {getattr(worker, '__name__', worker)!r} is defined in the notebook/script; "
            f"{requested} cannot import it: move it into a .py module or use start_method='fork'"
        )
    return requested


def start_context(worker: Callable[..., Any], requested: str) -> Any:
    """The multiprocessing context of :func:`start_method`. The forkserver imports torch, the
    rank's entry point and the training step once (``torch._dynamo`` is what the first
    optimizer step would import, ~1 s): measured here, a two-worker Hogwild run then starts as
    fast as with fork (1.1 s vs 1.5 s), after one slow first start of the server."""
    method = start_method(worker, requested)
    mpctx = mp.get_context(method)
    if method == "forkserver":
        mpctx.set_forkserver_preload(FORKSERVER_PRELOAD)
    return mpctx


class Payload:
    """The worker and its arguments on their way into a rank.

    With fork the child inherits them as they are. Otherwise they are pickled while the rank
    is being started (locks and shared tensors may only travel then) into bytes that the
    child unpickles in :func:`hpclab.dist.child.child_main`, after its log is set up: an
    unimportable module then becomes that rank's error, with its traceback, instead of a
    child that dies before it can say why.
    """

    def __init__(self, obj: Any = None, blob: bytes | None = None) -> None:
        self.obj, self.blob = obj, blob

    def __reduce__(self) -> tuple:
        from multiprocessing.reduction import ForkingPickler

        return (Payload, (None, bytes(ForkingPickler.dumps(self.obj))))

    def load(self) -> Any:
        return self.obj if self.blob is None else pickle.loads(self.blob)
