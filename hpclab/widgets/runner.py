"""The glue every live view shares (chapter 00): Run/Cancel, a progress bar, a one-line status
and a background thread.

``Runner(work, before)``: pressing Run (the button, or ``start()`` from code: one path) first calls
``before()`` in the caller's thread -- a panel reads and validates its controls there, so a bad
value is one line in the status and nothing runs -- then ``work(progress, before())`` in a thread (a
newer Run cancels the running one first); Cancel makes the next ``progress.update`` raise. Whatever ``work`` raises
becomes one line in the status, never a traceback under the cell (the last traceback is kept in
``runner.last_error``). ``work`` returns the status line to show when it succeeds.
"""

from __future__ import annotations

import html
import threading
import traceback
from collections.abc import Callable
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
        self._lock = threading.Lock()
        self.run_button.on_click(lambda _b: self.start())
        self.cancel_button.on_click(lambda _b: self.cancel())
        self.buttons = w.HBox([self.run_button, self.cancel_button, self.bar])

    def say(self, text: str, kind: str = "info") -> None:
        lines = text.split("\n")
        body = "<br>".join(html.escape(t) for t in lines)
        self.status.value = f'<span style="color:{COLORS[kind]}">{body}</span>'

    def _on_progress(self, done: float, total: float, note: str) -> None:
        self.bar.value = 0.0 if total <= 0 else min(1.0, done / total)
        if note:
            self.say(note)

    def start(self, wait: bool = False) -> None:
        """Run ``work`` in the background (``wait`` blocks, for notebooks and tests); the Run
        button calls exactly this.

        ``before()`` runs first, in the caller's thread (e.g. validation: a ConfigError it
        raises is shown as one line and nothing runs); what it returns is ``work``'s ``arg``."""
        try:
            arg = self.before() if self.before is not None else None
        except ConfigError as err:
            self.say(f"error: {err}", "error")
            return
        with self._lock:
            if self.thread is not None and self.thread.is_alive():
                self.progress.cancel()  # a newer request replaces the running one
                self.thread.join(timeout=30)
            self.progress = Progress(self._on_progress)
            self.thread = threading.Thread(target=self._run, args=(self.progress, arg), daemon=True)
            self.run_button.disabled = True
            self.cancel_button.disabled = False
            self.bar.value = 0.0
            self.say("running ...")
            self.thread.start()
        if wait:
            self.thread.join()

    def cancel(self) -> None:
        if self.progress is not None:
            self.progress.cancel()

    def _run(self, progress: Progress, arg: Any) -> None:
        try:
            done = self.work(progress, arg)
            self.bar.value = 1.0
            warn = "\n" in done  # a second line is a warning about the numbers
            self.say(done, "warn" if warn else "ok")
        except Cancelled:
            self.say("cancelled", "info")
        except ConfigError as err:
            self.say(f"error: {err}", "error")
        except Exception as err:  # noqa: BLE001 - a callback must never spill a traceback
            self.last_error = traceback.format_exc()
            first = str(err).splitlines()[0] if str(err) else ""
            self.say(f"error: {type(err).__name__}: {first} (details: .last_error)", "error")
        finally:
            self.run_button.disabled = False
            self.cancel_button.disabled = True
