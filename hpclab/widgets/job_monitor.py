"""A live view of a Slurm job: the queue, the job's state changes, its log tail, Cancel (chapter 07).

It watches on the glue every live view shares (:class:`~hpclab.widgets.runner.Runner`: the
background thread, the one-line status, errors as one line): the watch starts when the monitor is
made and polls the scheduler (every 0.2 s on the local cluster, every 5 s on a real one, see
:attr:`hpclab.cluster.slurm.Cluster.poll_s`), updating the queue as ``squeue`` shows it, a step
plot of the job's states over time (PENDING -> RUNNING -> COMPLETED, or a requeue's way back to
PENDING), and the last lines of its log. Cancel runs ``scancel`` on the job; the watch goes on
until the scheduler says the job ended.
"""

from __future__ import annotations

import html
import time
from typing import Any

from hpclab.cluster.slurm import Job
from hpclab.progress import Progress
from hpclab.widgets.runner import Runner

STATES = ("PENDING", "RUNNING", "COMPLETING", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")


class JobMonitor:
    def __init__(self, job: Job, tail: int = 12, start: bool = True) -> None:
        import ipywidgets as w
        import plotly.graph_objects as go

        self.job = job
        self.tail = tail
        self.states: list[tuple[float, str]] = []
        self.last = None
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
        self.runner = Runner(self._watch)
        self.cancel_button = self.runner.button(
            "Cancel", self.cancel, icon="stop", button_style="danger", tooltip="scancel the job"
        )
        self.widget = w.VBox(
            [w.HBox([self.cancel_button, self.status]), self.queue, self.figure, self.log]
        )
        if start:
            self.runner.start()

    @property
    def status(self) -> Any:
        return self.runner.status

    def cancel(self) -> None:
        """The Cancel button: ``scancel`` (a failure is one line in the status)."""
        self.job.cancel()
        self.runner.say(f"scancel {self.job.job_id} sent")

    def poll(self) -> tuple[bool, str]:
        """One update of every view: (the job ended, its status line)."""
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
        return st.done, f"job {self.job.job_id}: {st.state}{why}{code}"

    def _watch(self, progress: Progress, _arg: Any) -> str:
        """Poll until the job ends (its last line is the status, with a second line, shown as a
        warning, when it failed or ran out of time), or until :meth:`stop` cancels the watch."""
        while True:
            done, line = self.poll()
            if done:
                if self.last[0] not in ("COMPLETED", "CANCELLED"):
                    line += "\nit did not complete: its log is below"
                return line
            progress.update(0, 0, line)
            until = time.monotonic() + self.job.cluster.poll_s
            while time.monotonic() < until:
                progress.check()
                time.sleep(0.05)

    def stop(self) -> None:
        """Stop watching (the job goes on)."""
        self.runner.cancel()
        self.wait(timeout_s=5)

    def wait(self, timeout_s: float = 120.0) -> None:
        """Block until the job ended and the views show it (tests, scripts)."""
        if self.runner.thread is not None:
            self.runner.thread.join(timeout=timeout_s)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


def job_monitor(job: Job, **kwargs: Any) -> JobMonitor:
    return JobMonitor(job, **kwargs)
