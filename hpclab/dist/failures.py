"""What went wrong in a multi-rank run, cause first (chapter 00; seen in chapters 05 and 06).

When one rank dies, its peers fail too, a fraction of a second later, with "Connection closed
by peer" or a timeout: the rank that *noticed* is rarely the one that *failed*. The launcher
collects every rank's fate for a moment after the first failure and :func:`diagnose` orders
them: the root cause is the earliest failure that is not a lost peer (a rank killed by a
signal, one that exited without a result, one that raised its own exception); when every
failure is a lost peer or a timeout, a rank still running then is the one that hung. Each
other rank follows as a consequence in one line.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

from hpclab.config import RunError

# How gloo and NCCL report a peer that died or never answered. A rank failing with one of these
# is a consequence when another rank failed otherwise.
_PEER_LOSS = re.compile(
    r"closed by peer|reset by peer|broken pipe|connection refused|timed out waiting|"
    r"socket timeout|collective operation timeout|remote (worker|process)|NCCL communicator|"
    r"ncclRemoteError|ncclSystemError|Dist(Network|Backend|Store)Error",
    re.IGNORECASE,
)
_SOURCE_PREFIX = re.compile(r"\[[^\]\s]*\.(?:cc|cpp|h|hpp):\d+\]\s*")  # "[/…/pair.cc:553] "
_GLOO_ADVICE = re.compile(r"\s*This is typically caused by .*$")  # gloo's generic advice


@dataclass(frozen=True)
class Failure:
    """One rank's failure: it raised (``summary``, ``traceback``) or exited (``exitcode``)."""

    rank: int
    at: float  # time.monotonic(): when the rank raised, or when the parent saw it exit
    summary: str = ""  # "TypeName: first line" for a raised exception
    traceback: str = ""
    exitcode: int | None = None  # set when the rank exited without a word
    peer_loss: bool = False  # the exception says a peer went away or never answered
    killer: str = ""  # who sent the signal, when known ("the out-of-memory killer (...)")

    def how(self) -> str:
        """What happened to this rank, in words, without its number."""
        if self.exitcode is None:
            return f"failed: {self.summary}"
        return exit_words(self.exitcode, self.killer)


def exit_words(code: int, killer: str = "") -> str:
    """``-9`` -> "was killed by SIGKILL (signal 9)"; ``3`` -> "exited with code 3 ...";
    with ``killer``: "was killed by the out-of-memory killer (...) with SIGKILL (signal 9)"."""
    if code < 0 and killer:
        return f"was killed by {killer} with {exit_words(code)[len('was killed by ') :]}"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name} (signal {-code})"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code} before returning a result"


def is_peer_loss(exc: BaseException) -> bool:
    """True when ``exc`` says a peer died or did not answer (gloo, NCCL, the store)."""
    return bool(_PEER_LOSS.search(f"{type(exc).__name__}: {exc}"))


def one_line(text: str, limit: int = 200) -> str:
    """The first line of ``text`` without C++ source locations, at most ``limit`` characters."""
    first = _SOURCE_PREFIX.sub("", text.strip().splitlines()[0] if text.strip() else "")
    first = _GLOO_ADVICE.sub("", first)
    return first if len(first) <= limit else first[: limit - 3] + "..."


class RankError(RunError):
    """A multi-rank run failed. The first line names the root cause; ``rank`` is that rank.

    ``summary`` is the root cause in one line ("ValueError: ...", "was killed by SIGKILL
    (signal 9)"), ``traceback`` and ``log_tail`` belong to that rank, and ``consequences`` holds
    one line per other rank.
    """

    def __init__(
        self,
        rank: int,
        world_size: int,
        summary: str,
        tb: str = "",
        log_tail: str = "",
        consequences: tuple[str, ...] = (),
        raised: bool = True,
    ):
        self.rank = rank
        self.world_size = world_size
        self.summary = summary
        self.traceback = tb
        self.log_tail = log_tail
        self.consequences = tuple(consequences)
        lines = [f"rank {rank} of {world_size} {'failed: ' if raised else ''}{summary}"]
        lines += [f"  then: {c}" for c in self.consequences]
        if tb:
            lines.append(f"--- traceback of rank {rank} ---\n{tb.rstrip()}")
        if log_tail:
            lines.append(f"--- last output of rank {rank} ---\n{log_tail.rstrip()}")
        super().__init__("\n".join(lines))


class LaunchTimeout(RankError):
    """The whole run outlived its ``deadline_s``."""


def diagnose(
    failures: list[Failure],
    world_size: int,
    running: list[int],
    finished: list[int],
    timeout_s: float,
    log_tail=lambda rank: "",  # noqa: ANN001 - rank -> the tail of its output
) -> RankError:
    """The error for a failed run: root cause first, then each other rank in one line.

    ``running`` are ranks that were still running when the launcher stopped them, ``finished``
    ranks that had returned their result.
    """
    own = sorted((f for f in failures if not f.peer_loss), key=lambda f: f.at)
    lost = sorted((f for f in failures if f.peer_loss), key=lambda f: f.at)
    of = f"of {world_size}"
    if own or not running:
        root = (own or lost)[0]
        others = [f for f in own + lost if f is not root]
        rank, tb, raised = root.rank, root.traceback, root.exitcode is None
        summary = one_line(root.summary, 500) if raised else root.how()
    else:
        # Every failure is a lost peer or a timeout and somebody never answered: that one hung.
        rank, tb, raised, others = running[0], "", False, lost
        waiting = ", ".join(str(f.rank) for f in lost)
        summary = (
            f"hung: still running when rank(s) {waiting} timed out waiting for it in a "
            f"collective (timeout_s={timeout_s:g}: an endless loop, a deadlock, or a rank "
            "slower than the timeout)"
        )
        running = running[1:]
    consequences = [f"rank {f.rank} {of} {one_line(f.how())}" for f in others]
    consequences += [f"rank {r} {of} was still running; stopped by the launcher" for r in running]
    consequences += [f"rank {r} {of} had finished" for r in finished]
    return RankError(rank, world_size, summary, tb, log_tail(rank), tuple(consequences), raised)
