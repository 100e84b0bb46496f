"""A live view of a Slurm job: the queue, the job's state changes, its log tail, Cancel (chapter 07).

A background thread polls the scheduler (every 0.2 s on the local cluster, every 5 s on a real
one, see :attr:`hpclab.cluster.slurm.Cluster.poll_s`) and updates the widgets: the queue as
``squeue`` shows it, a step plot of the job's states over time (PENDING -> RUNNING ->
COMPLETED, or a requeue's way back to PENDING), and the last lines of its log. Cancel runs
``scancel``. Errors from the scheduler land in the status line, never as a traceback.
"""

from __future__ import annotations

import html
import threading
import time
from typing import Any

from hpclab.cluster.slurm import Job, SlurmError

STATES = ("PENDING", "RUNNING", "COMPLETING", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")


class JobMonitor:
    def __init__(self, job: Job, tail: int = 12, start: bool = True) -> None:
        import ipywidgets as w
        import plotly.graph_objects as go

        self.job = job
        self.tail = tail
        self.states: list[tuple[float, str]] = []
        self.last = None
        self._stop = threading.Event()
        self.figure = go.FigureWidget(
            data=[go.Scatter(mode="lines+markers", line_shape="hv", name="state")],
            layout={
                "height": 260,
                "title": f"job {job.job_id}",
                "xaxis": {"title": "seconds since submission"},
                "yaxis": {"categoryorder": "array", "categoryarray": list(STATES)},
            },
        )
        self.queue = w.HTML("")
        self.log = w.HTML("")
        self.status = w.HTML("")
        self.cancel_button = w.Button(description="Cancel", icon="stop", button_style="danger")
        self.cancel_button.on_click(lambda _b: self.cancel())
        self.widget = w.VBox(
            [w.HBox([self.cancel_button, self.status]), self.queue, self.figure, self.log]
        )
        self._thread = threading.Thread(target=self._loop, daemon=True)
        if start:
            self._thread.start()

    def cancel(self) -> None:
        """The Cancel button: ``scancel``; a failure is one line in the status, no traceback."""
        try:
            self.job.cancel()
            self.status.value = f"scancel {self.job.job_id} sent"
        except SlurmError as exc:
            self.status.value = html.escape(_first_line(exc))
        except Exception as exc:  # noqa: BLE001 - a button's callback must not spill either
            self.status.value = html.escape(f"{type(exc).__name__}: {_first_line(exc)}")

    def poll(self) -> bool:
        """One update of every view; True once the job has ended."""
        st = self.job.state()
        key = (st.state, st.reason, st.restarts)
        if key != self.last:
            self.last = key
            self.states.append((round(time.monotonic() - self.job.submitted_at, 2), st.state))
            with self.figure.batch_update():
                self.figure.data[0].x = [t for t, _ in self.states]
                self.figure.data[0].y = [s for _, s in self.states]
        why = f" ({st.reason})" if st.state == "PENDING" and st.reason not in ("", "None") else ""
        code = f", exit code {st.exit_code}" if st.done else ""
        self.status.value = f"job {self.job.job_id}: <b>{st.state}</b>{html.escape(why)}{code}"
        rows = self.job.cluster.queue()
        cells = "".join(
            f"<tr><td>{q['job_id']}</td><td>{html.escape(q['name'])}</td><td>{q['state']}</td>"
            f"<td>{q['elapsed']}</td><td>{html.escape(q['where_or_why'])}</td></tr>"
            for q in rows
        )
        self.queue.value = (
            "<table><tr><th>job</th><th>name</th><th>state</th><th>time</th>"
            f"<th>nodes (reason)</th></tr>{cells}</table>"
            if rows
            else "<i>queue empty</i>"
        )
        self.log.value = f"<pre>{html.escape(self.job.log(tail=self.tail))}</pre>"
        if st.done:
            self.cancel_button.disabled = True
        return st.done

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if self.poll():
                    return
            except Exception as exc:  # a view must not die with a traceback
                self.status.value = html.escape(f"{type(exc).__name__}: {_first_line(exc)}")
            self._stop.wait(self.job.cluster.poll_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def wait(self, timeout_s: float = 120.0) -> None:
        """Block until the job ended and the views show it (tests, scripts)."""
        self._thread.join(timeout=timeout_s)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


def job_monitor(job: Job, **kwargs: Any) -> JobMonitor:
    return JobMonitor(job, **kwargs)


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [""])[0]
