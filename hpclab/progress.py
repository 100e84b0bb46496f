"""Progress and cancellation for long runs (chapter 00).

A run receives a :class:`Progress`; it calls :meth:`Progress.update` between units of work.
The CLI shows a bar on stderr, a notebook panel shows a progress widget, and a Cancel button
sets the event that makes the next ``update`` raise :class:`Cancelled`.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

ProgressCallback = Callable[[float, float, str], None]


class Cancelled(Exception):
    """Raised inside a run when the user pressed Cancel (or Ctrl-C in the CLI)."""


class Progress:
    """Reports ``done`` out of ``total`` units and carries a cancel flag."""

    def __init__(
        self,
        callback: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        self._callback = callback
        self.cancel_event = cancel or threading.Event()

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    def cancel(self) -> None:
        self.cancel_event.set()

    def check(self) -> None:
        """Raise :class:`Cancelled` if the run was cancelled."""
        if self.cancel_event.is_set():
            raise Cancelled("run cancelled")

    def update(self, done: float, total: float, note: str = "") -> None:
        self.check()
        if self._callback is not None:
            self._callback(done, total, note)


def stderr_bar(width: int = 30) -> ProgressCallback:
    """A progress bar drawn on stderr when it is a terminal (silent otherwise, e.g. under CI)."""
    state = {"last": 0.0}

    def draw(done: float, total: float, note: str) -> None:
        if not sys.stderr.isatty():
            return
        now = time.monotonic()
        if done < total and now - state["last"] < 0.1:
            return
        state["last"] = now
        frac = 0.0 if total <= 0 else min(1.0, done / total)
        filled = int(frac * width)
        bar = "#" * filled + "-" * (width - filled)
        end = "\n" if done >= total else ""
        sys.stderr.write(f"\r[{bar}] {frac:6.1%} {note[:40]:<40}{end}")
        sys.stderr.flush()

    return draw
