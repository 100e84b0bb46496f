"""Stop a process and everything under it (chapter 00: no rank, kernel or server left behind)."""

from __future__ import annotations

from collections.abc import Iterable


def kill_tree(pids: Iterable[int], grace_s: float = 2.0) -> None:
    """TERM each pid and all its descendants, KILL what outlives ``grace_s``, wait for all.

    The descendants are listed before anything is signalled: once a parent dies its children
    are reparented and could no longer be found from it.
    """
    import psutil

    victims = []
    for pid in pids:
        try:
            parent = psutil.Process(pid)
            victims.extend([*parent.children(recursive=True), parent])
        except psutil.NoSuchProcess:
            pass
    for v in victims:
        try:
            v.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(victims, timeout=grace_s)
    for v in alive:
        try:
            v.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=grace_s)


# multiprocessing's helpers that live as long as the process that started them and serve its
# next launches: the forkserver (the start method where a GPU is visible) and its resource tracker
_HELPERS = ("multiprocessing.forkserver", "multiprocessing.resource_tracker")


def left_behind() -> list:
    """This process's descendants (``psutil.Process``) other than multiprocessing's long-lived
    helpers: after a launch returns or raises, what a run left running (a rank, a DataLoader
    worker). The ranks the forkserver started are its children, so they count."""
    import psutil

    def helper(p: psutil.Process) -> bool:
        try:
            return any(h in " ".join(p.cmdline()) for h in _HELPERS)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return True  # gone meanwhile: not left behind

    return [p for p in psutil.Process().children(recursive=True) if not helper(p)]
