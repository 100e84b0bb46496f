"""Chapter 05: the parameter server's bookkeeping, free of any communication.

A server holds a shard of the parameters and a *version* (how many updates it applied). A
trainer pulls the shard at some version, computes a gradient there, and pushes it back; by
then other trainers may have pushed theirs. The gradient's **staleness** is how many versions
the shard moved on in between (0 in synchronous mode; about ``trainers - 1`` in asynchronous,
Downpour-style mode, Dean et al., NIPS 2012, Nakayama 2017).

**Stale-synchronous parallel** (SSP, Ho et al., NIPS 2013) bounds it: a trainer that has pushed
more than ``bound`` steps beyond the slowest unfinished trainer waits. ``bound=0`` is lock-step,
a large bound is fully asynchronous.

Everything here is pure Python on tensors, so scripted interleavings can test it exactly; the
distributed server in :mod:`hpclab.sgd.paramserver` calls the same functions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import torch


@dataclass
class ParameterShard:
    """One server's slice of the parameters (``params [n]``), its version and the staleness of
    every gradient it applied."""

    params: torch.Tensor
    lr: float
    version: int = 0
    staleness: list[int] = field(default_factory=list)


def apply_gradient(shard: ParameterShard, grad: torch.Tensor, grad_version: int) -> int:
    """SGD on the shard with a gradient computed at version ``grad_version``; returns its
    staleness (versions applied since that pull) and advances the version by one."""
    staleness = shard.version - grad_version
    if staleness < 0:
        raise ValueError(
            f"gradient computed at version {grad_version} but the shard is only at {shard.version}"
        )
    shard.params.add_(grad, alpha=-shard.lr)
    shard.version += 1
    shard.staleness.append(staleness)
    return staleness


def ssp_allows(
    clocks: Sequence[int], trainer: int, bound: int, finished: Iterable[int] = ()
) -> bool:
    """May ``trainer`` (having pushed ``clocks[trainer]`` gradients) start its next step?

    Yes while it is at most ``bound`` pushes ahead of the slowest trainer that is still running
    (finished trainers no longer hold anyone back).
    """
    done = set(finished)
    running = [c for i, c in enumerate(clocks) if i not in done or i == trainer]
    return clocks[trainer] - min(running) <= bound


AllowRule = Callable[[Sequence[int], int, int], bool]


def simulate_ssp(
    attempts: Sequence[int], trainers: int, bound: int, allows: AllowRule = ssp_allows
) -> tuple[list[int], list[int]]:
    """Replay a schedule: ``attempts`` lists which trainer tries to push next, in time order.

    A trainer that pushes and is then not allowed to go on waits: its later attempts queue
    behind it, and it resumes as soon as a push by another trainer lets it. Returns the pushes
    in the order they happened, and the trainers still waiting at the end.
    ``allows(clocks, trainer, bound)`` is the rule (the library's or an exercise's).
    """
    clocks = [0] * trainers
    blocked: set[int] = set()
    queued: list[int] = []
    done: list[int] = []

    def push(t: int) -> None:
        clocks[t] += 1
        done.append(t)
        if not allows(list(clocks), t, bound):
            blocked.add(t)

    for t in attempts:
        if t in blocked:
            queued.append(t)
            continue
        push(t)
        # Another trainer's push may free the waiting ones; a freed one runs its queued attempt.
        progress = True
        while progress:
            progress = False
            for w in sorted(blocked):
                if allows(list(clocks), w, bound):
                    blocked.discard(w)
                    if w in queued:
                        queued.remove(w)
                        push(w)
                    progress = True
    return done, sorted(blocked)


def replay_interleaving(
    events: Sequence[tuple[str, int]],
    apply: Callable[[ParameterShard, torch.Tensor, int], int] = apply_gradient,
    size: int = 4,
    lr: float = 0.1,
) -> tuple[ParameterShard, list[int]]:
    """Replay ``("pull", t)`` / ``("push", t)`` events on one shard with ``apply``.

    Trainer ``t``'s gradient is the constant ``t + 1`` (so the final parameters say which
    gradients were applied); returns the shard and the staleness ``apply`` reported per push.
    """
    shard = ParameterShard(torch.zeros(size), lr)
    pulled: dict[int, int] = {}
    reported = []
    for kind, t in events:
        if kind == "pull":
            pulled[t] = shard.version
        elif kind == "push":
            if t not in pulled:
                raise ValueError(f"trainer {t} pushes before it pulled")
            grad = torch.full((size,), float(t + 1))
            reported.append(apply(shard, grad, pulled.pop(t)))
        else:
            raise ValueError(f"event {kind!r} is not allowed; allowed: pull, push")
    return shard, reported


# A scripted interleaving of 3 trainers (used by the notebook, the checks and the tests).
SCRIPT: tuple[tuple[str, int], ...] = (
    ("pull", 0),
    ("pull", 1),
    ("pull", 2),
    ("push", 0),  # staleness 0: nothing happened since its pull
    ("pull", 0),
    ("push", 1),  # 1: trainer 0's push came in between
    ("push", 2),  # 2
    ("pull", 1),
    ("push", 0),  # 2: trainers 1 and 2 pushed since trainer 0 pulled again
    ("pull", 2),
    ("push", 1),  # 1
    ("push", 2),  # 1
)
SCRIPT_STALENESS: tuple[int, ...] = (0, 1, 2, 2, 1, 1)


def script_table(events: Sequence[tuple[str, int]] = SCRIPT):
    """The scripted interleaving as a table: each event, the shard's version after it, and the
    staleness of each push (what the notebook shows)."""
    import pandas as pd

    shard = ParameterShard(torch.zeros(1), 0.1)
    pulled: dict[int, int] = {}
    rows = []
    for kind, t in events:
        staleness = None
        if kind == "pull":
            pulled[t] = shard.version
        else:
            staleness = apply_gradient(shard, torch.zeros(1), pulled.pop(t))
        rows.append(
            {
                "event": f"trainer {t} {'pulls' if kind == 'pull' else 'pushes'}",
                "version_after": shard.version,
                "staleness": staleness,
            }
        )
    return pd.DataFrame(rows).astype({"staleness": "Int64"})


def ssp_table(attempts: Sequence[int], trainers: int, bounds: Sequence[int]):
    """For each bound: the order in which the attempted pushes actually happen under SSP."""
    import pandas as pd

    rows = []
    for b in bounds:
        order, waiting = simulate_ssp(attempts, trainers, b)
        rows.append(
            {
                "bound": b,
                "pushes in order": " ".join(map(str, order)),
                "still waiting": ", ".join(map(str, waiting)) or "-",
            }
        )
    return pd.DataFrame(rows).set_index("bound")
