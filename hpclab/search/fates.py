"""What became of each trial of a search: one vocabulary for every backend (chapter 08).

Every trial a search was asked for ends as exactly one ``fate``:

- ``finished``: it trained all its epochs and has a validation loss (a diverged trial, loss NaN,
  finished too: its loss is ``inf``, a result the searcher learns from);
- ``failed``: it produced no result; ``cause`` says why, one of :data:`CAUSES` (the trial's own
  exception, a signal that killed its process, the out-of-memory killer, its worker lost, the
  broker lost, the search interrupted, the job that ran it ended), and ``error`` the one line;
- ``stopped``: stopped on purpose (early stopping) after ``epochs`` epochs, with the loss it had;
- ``never run``: never handed to a worker, because the search stopped first.

So the counts always add up to the trials asked for (:func:`fate_counts`). A search that cannot
finish raises :class:`SearchIncomplete` carrying the result with every trial accounted for: the
CLI prints (and with ``--save`` stores) that result and exits non-zero; a notebook finds it in
the exception's ``result``.
"""

from __future__ import annotations

import math
import time
from typing import Any

from hpclab.config import RunError

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


class SearchStopped(Exception):
    """Raised by a backend that cannot go on: ``records`` holds every trial it handed out."""

    def __init__(self, cause: str, message: str, records: list[dict]) -> None:
        super().__init__(message)
        self.cause, self.records = cause, records


class SearchIncomplete(RunError):
    """A search that stopped before its last trial; ``result`` has every trial's fate and the
    message says how many finished. ``exit_code``: 130 when interrupted (Ctrl-C), else 1."""

    def __init__(self, message: str, result: Any, cause: str) -> None:
        super().__init__(message)
        self.result, self.cause = result, cause
        self.exit_code = 130 if cause == "interrupted" else 1


def fate_of(out: dict[str, Any]) -> dict[str, Any]:
    """The fate fields of a trial that ran to its end (:func:`hpclab.trial.run_trial`'s dict)."""
    if out.get("pruned"):
        return {"fate": "stopped", "cause": "", "error": ""}
    return {"fate": "finished", "cause": "", "error": ""}


def failed_record(
    index: int, params: dict, error: str, t_submit: float, t0: float, clock=time.time,
    cause: str = "exception",
) -> dict:  # fmt: skip
    """A trial that produced no result, on every backend (``clock``: the one ``t_submit`` and
    ``t0`` were read from; ``cause``: one of :data:`CAUSES`)."""
    if cause not in CAUSES:
        raise ValueError(f"cause={cause!r}; allowed: {', '.join(CAUSES)}")
    now = clock()
    return {
        "trial": index, "params": params, "val_loss": math.inf, "val_acc": 0.0, "epochs": 0,
        "seconds": 0.0, "overhead_s": now - t_submit, "queue_s": 0.0, "startup_s": 0.0,
        "start_s": t_submit - t0, "end_s": now - t0, "worker": None, "node": "",
        "fate": "failed", "cause": cause, "error": error,
    }  # fmt: skip


def never_run_record(index: int) -> dict:
    """A trial the search was asked for but never handed to a worker."""
    return {
        "trial": index, "params": {}, "val_loss": math.inf, "val_acc": 0.0, "epochs": 0,
        "seconds": 0.0, "overhead_s": 0.0, "queue_s": 0.0, "startup_s": 0.0, "start_s": 0.0,
        "end_s": 0.0, "worker": None, "node": "", "fate": "never run", "cause": "", "error": "",
    }  # fmt: skip


def account_for_all(records: list[dict], trials: int) -> list[dict]:
    """``records`` plus a never-run record for each trial index below ``trials`` without one,
    in trial order; every record gets a ``fate``."""
    by_index = {r["trial"]: r for r in records}
    for r in records:
        if "fate" not in r:
            r.update(fate_of(r) if not r.get("error") else {"fate": "failed", "cause": "exception"})
    return [by_index.get(i) or never_run_record(i) for i in range(trials)]


def fate_counts(records: list[dict]) -> dict[str, int]:
    """How many trials ended each way, all four fates present (zero or more each)."""
    counts = dict.fromkeys(FATES, 0)
    for r in records:
        counts[r.get("fate", "finished")] += 1
    return counts


def summary(records: list[dict]) -> str:
    """``"3 finished, 1 failed (worker lost), 0 stopped, 26 never run"``: one line."""
    counts = fate_counts(records)
    causes = sorted({r["cause"] for r in records if r.get("fate") == "failed" and r.get("cause")})
    failed = f"{counts['failed']} failed" + (f" ({', '.join(causes)})" if causes else "")
    return (
        f"{counts['finished']} finished, {failed}, {counts['stopped']} stopped, "
        f"{counts['never run']} never run"
    )
