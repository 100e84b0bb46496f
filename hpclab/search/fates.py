"""What became of each trial of a search: one vocabulary for every backend (chapter 08).

Every trial a search was asked for ends as exactly one ``fate``:

- ``finished``: it trained all its epochs and has a validation loss (a diverged trial, loss NaN,
  finished too: its loss is ``inf``, a result the searcher learns from);
- ``failed``: it produced no result; ``cause`` says why, one of :data:`CAUSES` (the trial's own
  exception, a signal that killed its process, the out-of-memory killer, its worker lost, the
  broker lost, the search interrupted, the job that ran it ended), and ``error`` the one line;
- ``stopped``: stopped on purpose (early stopping: ASHA, Hyperband) at epoch ``epochs``, with the
  loss it had then;
- ``never run``: never handed to a worker, because the search stopped first.

So the counts always add up to the trials asked for (:func:`fate_counts`); the records themselves
are :class:`hpclab.trial_record.TrialRecord`. A search that cannot
finish raises :class:`SearchIncomplete` carrying the result with every trial accounted for: the
CLI prints (and with ``--save`` stores) that result and exits non-zero; a notebook finds it in
the exception's ``result``.
"""

from __future__ import annotations

from typing import Any

from hpclab.config import RunError
from hpclab.trial_record import CAUSES, FATES

__all__ = ["CAUSES", "FATES", "SearchIncomplete", "SearchStopped", "fate_counts", "summary"]


class SearchStopped(Exception):
    """Raised by a backend that cannot go on: ``records`` holds every trial it handed out
    (:class:`~hpclab.trial_record.TrialRecord`)."""

    def __init__(self, cause: str, message: str, records: list[Any]) -> None:
        super().__init__(message)
        self.cause, self.records = cause, records


class SearchIncomplete(RunError):
    """A search that stopped before its last trial; ``result`` has every trial's fate and the
    message says how many finished. ``exit_code``: 130 when interrupted (Ctrl-C), else 1."""

    def __init__(self, message: str, result: Any, cause: str) -> None:
        super().__init__(message)
        self.result, self.cause = result, cause
        self.exit_code = 130 if cause == "interrupted" else 1


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
