"""The glue every live view shares (chapter 00): Run/Cancel, a progress bar, a one-line status
and a background thread.

``Runner(work, before)``: pressing Run (the button, or ``start()`` from code: one path) first calls
``before()`` in the caller's thread -- a panel reads and validates its controls there, so a bad
value is one line in the status and nothing runs -- then ``work(progress, before())`` in a thread.
``work`` returns the status line to show when it succeeds; it shows its results inside
``with runner.current(progress):``, which refuses (raises ``Cancelled``) once the run was cancelled
or replaced, so a late result never overwrites a newer one.

Run pressed again while a run is going (or a live control moved) is a newer request: the click
returns at once, the running run is cancelled, and the new one starts in its thread as soon as the
old one has stopped (two measurements never share the cores). Only the newest run writes the
status, the bar and the figure. Cancel makes the next ``progress.update`` raise. Whatever ``work``
or a button's callback raises becomes one line in the status, never a traceback under the cell
(the last traceback is kept in ``runner.last_error``).
"""

from __future__ import annotations

import html
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from hpclab.config import ConfigError
from hpclab.progress import Cancelled, Progress

COLORS = {"info": "#444", "ok": "#1a7f37", "warn": "#b54708", "error": "#b42318"}


class Runner:
    def __init__(
        self, work: Callable[[Progress, Any], str], before: Callable[[], Any] | None = None
    ) -> None:
        import ipywidgets as w

        self.work = work
        self.before = before
        self.last_error = ""
        self.run_button = w.Button(description="Run", button_style="primary", icon="play")
        self.cancel_button = w.Button(description="Cancel", icon="stop", disabled=True)
        self.bar = w.FloatProgress(value=0.0, min=0.0, max=1.0, description="progress")
        self.status = w.HTML(value="")
        self.thread: threading.Thread | None = None
        self.progress: Progress | None = None
        self._refused = ""  # a Run refused while another run goes on: said again when it ends
        # Reentrant: ``work`` may report progress while it holds ``current()``.
        self._lock = threading.RLock()
        self.run_button.on_click(lambda _b: self._safely(self.start))
        self.cancel_button.on_click(lambda _b: self._safely(self.cancel))
        self.buttons = w.HBox([self.run_button, self.cancel_button, self.bar])

    def button(self, description: str, action: Callable[[], None], **style: Any) -> Any:
        """A further button of this view (e.g. a job's ``scancel``): whatever its ``action``
        raises is one line in the status, as for Run and Cancel."""
        import ipywidgets as w

        b = w.Button(description=description, **style)
        b.on_click(lambda _b: self._safely(action))
        return b

    def say(self, text: str, kind: str = "info") -> None:
        lines = text.split("\n")
        body = "<br>".join(html.escape(t) for t in lines)
        self.status.value = f'<span style="color:{COLORS[kind]}">{body}</span>'

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def _error_line(self, err: BaseException) -> str:
        """One line for an unexpected error (call it in the ``except`` block): the traceback
        goes to ``last_error``."""
        self.last_error = traceback.format_exc()
        return _one_line(err)

    def _safely(self, action: Callable[[], None]) -> None:
        """A button's callback: whatever it raises is one line in the status."""
        try:
            action()
        except Exception as err:  # noqa: BLE001 - a callback must never spill a traceback
            self.say(self._error_line(err), "error")

    def _on_progress(self, progress: Progress, done: float, total: float, note: str) -> None:
        with self._lock:
            if progress is not self.progress:  # a replaced run reports no more
                return
            self.bar.value = 0.0 if total <= 0 else min(1.0, done / total)
            if note:
                self.say(note)

    def start(self, wait: bool = False) -> None:
        """Run ``work`` in the background (``wait`` blocks, for notebooks and tests); the Run
        button calls exactly this.

        ``before()`` runs first, in the caller's thread (e.g. validation: whatever it raises is
        one line in the status and nothing runs); what it returns is ``work``'s ``arg``."""
        try:
            arg = self.before() if self.before is not None else None
        except ConfigError as err:
            self._refuse(f"error: {err}")
            return
        except Exception as err:  # noqa: BLE001 - reading the controls must not spill either
            self._refuse(self._error_line(err))
            return
        with self._lock:
            self._refused = ""
            previous = self.thread if self.running else None
            if previous is not None:
                self.progress.cancel()  # the newer request wins
            progress = Progress(
                lambda done, total, note: self._on_progress(progress, done, total, note)
            )
            self.progress = progress
            self.thread = threading.Thread(
                target=self._run, args=(progress, arg, previous), daemon=True
            )
            self.cancel_button.disabled = False
            self.bar.value = 0.0
            self.say("stopping the previous run ..." if previous else "running ...")
            thread = self.thread
            thread.start()
        if wait:
            thread.join()

    def _refuse(self, line: str) -> None:
        with self._lock:
            if self.running:  # the running run goes on; its status will repeat this line
                self._refused = line
                line += " (the run before goes on)"
            self.say(line, "error")

    def cancel(self) -> None:
        with self._lock:
            if self.running and not self.progress.cancelled:
                self.progress.cancel()
                self.say("cancelling ...")

    @contextmanager
    def current(self, progress: Progress) -> Iterator[None]:
        """Hold while showing a run's results: raises ``Cancelled`` when Cancel was pressed or a
        newer run replaced this one, so a late result never overwrites the newer one's."""
        with self._lock:
            progress.check()
            if progress is not self.progress:
                raise Cancelled("replaced by a newer run")
            yield

    def _run(self, progress: Progress, arg: Any, previous: threading.Thread | None) -> None:
        error = ""
        try:
            if previous is not None:
                previous.join()  # cancelled: it stops at its next progress update
                with self._lock:
                    if progress is self.progress and not progress.cancelled:
                        self.say("running ...")
            progress.check()
            line = self.work(progress, arg)
            kind = "warn" if "\n" in line else "ok"  # a second line is a warning about numbers
        except Cancelled:
            line, kind = "cancelled", "info"
        except ConfigError as err:
            line, kind = f"error: {err}", "error"
        except Exception as err:  # noqa: BLE001 - a callback must never spill a traceback
            if progress.cancelled:
                # what a run raises once Cancel was pressed is the cancel's doing (a search says
                # what it kept): the student sees "cancelled", with that line
                first = str(err).splitlines()[0] if str(err) else ""
                line, kind = f"cancelled: {first}" if first else "cancelled", "info"
            else:
                line, kind, error = _one_line(err), "error", traceback.format_exc()
        with self._lock:
            if progress is not self.progress:  # a newer run owns the status now
                return
            if error:
                self.last_error = error
            if kind in ("ok", "warn"):
                self.bar.value = 1.0
            if self._refused:
                line, kind, self._refused = f"{line}\n{self._refused}", "error", ""
            self.say(line, kind)
            self.cancel_button.disabled = True


def _one_line(err: BaseException) -> str:
    first = str(err).splitlines()[0] if str(err) else ""
    return f"error: {type(err).__name__}: {first} (details: .last_error)"
