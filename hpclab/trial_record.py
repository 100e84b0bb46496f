"""One trial's record, the same on every backend of the search (chapter 08) and in chapter 07's
job array: one dataclass, one clock, one builder. It lives beside :mod:`hpclab.trial` (which both
chapters share), below :mod:`hpclab.cluster` and :mod:`hpclab.search`, so neither imports the
other for it.

The clock is the wall clock (``time.time()``): a trial that ran in another process, or on another
node of a cluster whose clocks are synchronised, is stamped on the same clock as the searcher's
submission, so ``queue_s`` (submission until its process began) means the same thing everywhere.
Every record carries the trial's fate (:mod:`hpclab.search.fates`): finished, failed with a
cause, stopped at epoch ``epochs`` (early stopping), or never run.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

# What became of a trial (:mod:`hpclab.search.fates` explains each); a failed trial's cause.
FATES = ("finished", "failed", "stopped", "never run")
CAUSES = (
    "exception",
    "killed by signal",
    "out of memory",
    "worker lost",
    "broker lost",
    "interrupted",
    "job ended",
)
clock = time.time  # the one clock of every search timestamp (seconds, wall clock)


@dataclass
class TrialRecord:
    """One trial. Times in seconds: ``start_s``, ``began_s`` and ``end_s`` from the search's
    start (submission, compute began, the searcher had the result); ``queue_s`` submission until
    the trial's process took it (scheduler, throttle slot or broker); ``startup_s`` a fresh
    process's interpreter, imports and data before its first trial (0 on a warm worker);
    ``seconds`` the trial's own compute; ``overhead_s`` the rest of its wall time.
    ``curve``: the validation loss after each epoch it trained (early stopping reads it)."""

    trial: int
    params: dict[str, Any]
    fate: str = "finished"
    cause: str = ""
    error: str = ""
    val_loss: float = math.inf
    val_acc: float = 0.0
    epochs: int = 0
    curve: list[float] = field(default_factory=list)
    seconds: float = 0.0
    overhead_s: float = 0.0
    queue_s: float = 0.0
    startup_s: float = 0.0
    start_s: float = 0.0
    began_s: float = 0.0
    end_s: float = 0.0
    worker: str | None = None
    node: str = ""
    retries: int = 0

    def __post_init__(self) -> None:
        if self.fate not in FATES:
            raise ValueError(f"fate={self.fate!r}; allowed: {', '.join(FATES)}")
        if self.fate == "failed" and self.cause not in CAUSES:
            raise ValueError(f"cause={self.cause!r}; allowed: {', '.join(CAUSES)}")

    def as_dict(self) -> dict[str, Any]:
        """The flat record a :class:`~hpclab.results.Result` holds."""
        return asdict(self)

    @classmethod
    def from_output(
        cls, index: int, params: dict, out: dict[str, Any], t_submit: float, t_seen: float,
        t0: float,
    ) -> TrialRecord:  # fmt: skip
        """A trial that ran (:func:`hpclab.trial.run_trial`'s dict, in this process, on a warm
        worker, or :func:`hpclab.trial.timed_trials`'s from a fresh one, which adds
        ``process_start``, ``startup_s`` and ``node``). ``t_submit``, ``t_seen`` and ``t0``
        (the search's start) are read from :data:`clock`."""
        began = out["started_at"]
        node = out.get("node", "")
        return cls(
            trial=index, params=params, val_loss=out["val_loss"], val_acc=out["val_acc"],
            epochs=out["epochs"], curve=list(out.get("curve", [])), seconds=out["seconds"],
            overhead_s=max(0.0, (t_seen - t_submit) - out["seconds"]),
            queue_s=max(0.0, out.get("process_start", began) - t_submit),
            startup_s=out.get("startup_s", 0.0), start_s=t_submit - t0, began_s=began - t0,
            end_s=t_seen - t0, worker=f"{node or 'here'}:{out['pid']}", node=node,
            **stopped_or_finished(out),
        )  # fmt: skip

    @classmethod
    def failed(
        cls, index: int, params: dict, error: str, t_submit: float, t0: float,
        cause: str = "exception",
    ) -> TrialRecord:  # fmt: skip
        """A trial that produced no result (``cause``: one of :data:`~hpclab.search.fates.CAUSES`)."""
        now = clock()
        return cls(
            trial=index, params=params, fate="failed", cause=cause, error=error,
            overhead_s=now - t_submit, start_s=t_submit - t0, began_s=t_submit - t0,
            end_s=now - t0,
        )  # fmt: skip

    @classmethod
    def never_run(cls, index: int) -> TrialRecord:
        """A trial the search was asked for but never handed to a worker."""
        return cls(trial=index, params={}, fate="never run")


def stopped_or_finished(out: dict[str, Any]) -> dict[str, str]:
    """The fate fields of a trial that ran: stopped early (``pruned``) or finished."""
    return {"fate": "stopped" if out.get("pruned") else "finished", "cause": "", "error": ""}


def fate_line(record: dict[str, Any]) -> str:
    """``"stopped at epoch 3"``, ``"failed (worker lost)"``, ``"finished"``: one trial's fate."""
    fate = record.get("fate", "finished")
    if fate == "stopped":
        return f"stopped at epoch {record['epochs']}"
    if fate == "failed":
        return f"failed ({record.get('cause') or 'exception'})"
    return fate


def account_for_all(records: list[TrialRecord], trials: int) -> list[dict[str, Any]]:
    """Every trial index below ``trials`` as a flat record, in trial order: the backend's
    records, and a never-run record for each index without one."""
    by_index = {r.trial: r for r in records}
    return [(by_index.get(i) or TrialRecord.never_run(i)).as_dict() for i in range(trials)]
