"""Chapter 07's resumable training under a late pre-timeout warning: USR2 arriving while the
checkpoint is written, after the last step, or while the interpreter shuts down must never kill
a job that saved its work (Slurm would mark it FAILED, 0:12, and the result would be lost).

Each case runs the job's entry point (``python -m hpclab.cluster.resumable``, as the job script
does after ``trap '' USR2``) in a subprocess and, from the moment its window opens (a line it
prints), sends it USR2 every millisecond until it exits. 3 windows, one run each, all at once;
each run receives hundreds of signals in its window. About 10-30 s on 2 busy cores."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import torch

from hpclab.cluster.checkpoint import load_latest

STEPS = 6
RUNS = 1  # per window: each run receives hundreds of USR2 in its window
# window -> the line after which the storm starts, and what must be on disk at the end
WINDOWS = {
    "checkpoint write": "step 3 ",  # the first USR2 asks for a checkpoint, the rest hit its write
    "after the last step": f"step {STEPS} ",
    "interpreter shutdown": "finished",
}


def _storm(proc: subprocess.Popen, start_at: str, sent: list[int]) -> None:
    """Read the job's lines; from ``start_at`` on, USR2 every millisecond until it exits."""
    for line in proc.stdout:
        if start_at in line:
            break
    reader = threading.Thread(target=proc.stdout.read, daemon=True)  # keep the pipe drained
    reader.start()
    while proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGUSR2)
            sent[0] += 1
        except ProcessLookupError:
            break
        time.sleep(0.001)


def test_a_late_usr2_never_kills_a_job_that_saved(tmp_path, no_orphans):
    runs = []
    for window, start_at in WINDOWS.items():
        for k in range(RUNS):
            out = tmp_path / f"{window.replace(' ', '-')}-{k}"
            out.mkdir()
            # As the job script does: USR2 ignored until Python installs its handler.
            cmd = f"trap '' USR2; exec {sys.executable} -m hpclab.cluster.resumable {out} {STEPS} 0.05 0"
            proc = subprocess.Popen(["bash", "-c", cmd], stdout=subprocess.PIPE, text=True,
                                    env=dict(os.environ, OMP_NUM_THREADS="1"))  # fmt: skip
            sent = [0]
            t = threading.Thread(target=_storm, args=(proc, start_at, sent))
            t.start()
            runs.append((window, out, proc, t, sent))
    failures = []
    for window, out, proc, t, sent in runs:
        t.join(timeout=120)
        code = proc.wait(timeout=30)
        if code != 0:
            failures.append(f"{window}: exit {code} after {sent[0]} USR2")
            continue
        assert sent[0] > 0, f"{window}: the storm never started"
        if window == "checkpoint write":
            state, path, refused = load_latest(out / "checkpoints")
            assert state is not None and state["step"] >= 3 and not refused, (window, refused)
            assert not (out / "final.pt").exists()  # it stopped to be requeued
        else:
            assert torch.load(out / "final.pt").numel() > 0, window
    assert not failures, failures
    print(f"USR2 sent: {sum(r[4][0] for r in runs)} in {len(runs)} runs")
