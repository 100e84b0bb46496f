"""Experiment ``requeue``: checkpoint and restart under a time limit (chapter 07, section 3).

The job runs :mod:`hpclab.cluster.resumable` with ``--requeue`` and one of two triggers:

- ``limit`` (the real thing): ``--time=1`` (one minute, Slurm's smallest) and
  ``--signal=B:USR2@warn_s``; the training lasts longer than the limit, so the controller warns
  it, it saves and requeues, possibly several times, and finishes in a later attempt. The
  controller sends a warning that falls due before its next periodic check (every 30 s) at once,
  so it comes up to ~30 s early (``@60`` came 63 s before the limit; ``@50`` on a one-minute
  job came 4 s after the start, before Python had its handler: hence ``trap '' USR2`` before
  ``exec``, and ``warn_s`` < 30 here); the kill comes some seconds after the limit; a requeued job waits
  ``cred_expire`` seconds (Slurm's default 120 s; the local cluster sets 5, stated in
  ``scripts/local_slurm.sh``).
- ``signal`` (fast, for tests and quick mode): after ``after_steps`` steps the same USR2 is sent
  through Slurm to the batch shell (``scancel --signal=USR2 --batch``): the handler, checkpoint,
  ``scontrol requeue`` and restart are the real ones; only the moment is chosen by us.

Records: ``requeues``, ``final_params_max_diff`` (against the same training in one go),
``checkpoint_mb_per_s``, ``requeue_gap_s`` (signal -> the next attempt running), and in ``limit``
mode ``signal_before_limit_s``; then the loss per step with its attempt (the restart shows).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from hpclab.cluster import local
from hpclab.cluster.resumable import train_uninterrupted
from hpclab.cluster.runner import new_workdir, python, require_cluster, submit
from hpclab.cluster.slurm import Job, SlurmError
from hpclab.cluster.spec import JobSpec
from hpclab.config import Config, ConfigError, param
from hpclab.progress import Progress
from hpclab.results import Result, make_result


@dataclass(frozen=True)
class RequeueConfig(Config):
    trigger: str = param(
        "limit", choices=("limit", "signal"), quick="signal", help="time limit, or USR2 sent early"
    )
    steps: int = param(300, min=2, max=100000, quick=30, help="training steps")
    step_delay_s: float = param(0.25, min=0.0, max=10.0, quick=0.05, help="extra seconds per step")
    after_steps: int = param(
        8, min=1, max=100000, help="signal trigger: USR2 after this many steps"
    )
    warn_s: int = param(15, min=5, max=29, help="limit trigger: --signal=B:USR2@warn_s")
    seed: int = param(0, min=0, max=2**31 - 1, help="data and weight seed")

    def check(self) -> None:
        if self.trigger == "signal" and self.after_steps >= self.steps:
            raise ConfigError(
                f"after_steps={self.after_steps} must be below steps={self.steps}; "
                f"allowed: 1..{self.steps - 1}"
            )
        if self.trigger == "limit" and self.steps * self.step_delay_s < 70:
            raise ConfigError(
                f"steps x step_delay_s = {self.steps * self.step_delay_s:g} s would end before a "
                "one-minute limit; allowed: >= 70 s"
            )


def requeue_spec(config: RequeueConfig) -> JobSpec:
    if config.trigger == "limit":
        return JobSpec(
            name="requeue", time="1", signal=f"B:USR2@{config.warn_s}", requeue=True, mem="1G"
        )
    return JobSpec(name="requeue", time="00:05:00", signal="B:USR2@30", requeue=True, mem="1G")


def requeue_commands(config: RequeueConfig, work: str) -> list[str]:
    """Python becomes the batch shell (``exec``), so ``--signal=B:USR2`` reaches it directly.

    Until Python has installed its handler, USR2 would kill it: ignore it until then (an ignored
    signal stays ignored across ``exec``; ``signal.signal`` takes it over).
    """
    args = f"{work} {config.steps} {config.step_delay_s} {config.seed}"
    return ["trap '' USR2", f"exec {python()} -m hpclab.cluster.resumable {args}"]


def read_events(work: Path) -> list[dict]:
    path = work / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_for_step(job: Job, step: int, timeout_s: float, progress: Progress) -> None:
    """Until the job's log shows ``step``; a job that ends first is an error."""
    deadline = time.monotonic() + timeout_s
    while f"step {step} " not in job.log():
        st = job.state()
        if st.done:
            raise SlurmError(
                f"job {job.job_id} ended {st.state} before step {step}:\n{job.log(tail=10)}"
            )
        if time.monotonic() > deadline:
            job.cancel()
            raise SlurmError(
                f"job {job.job_id} did not reach step {step} in {timeout_s:g} s; cancelled"
            )
        progress.check()
        time.sleep(0.1)


def run_requeue(config: RequeueConfig, progress: Progress) -> Result:
    cluster = require_cluster()
    site = local.site_profile(cluster)
    work = new_workdir("requeue")
    job = submit(
        cluster, site, requeue_spec(config), requeue_commands(config, str(work)), workdir=work
    )
    progress.update(0, 3, f"job {job.job_id} submitted")
    try:
        if config.trigger == "signal":
            wait_for_step(job, config.after_steps, 120, progress)
            cluster.signal(job.job_id, "USR2", batch=True)
            progress.update(1, 3, f"USR2 sent to job {job.job_id}")
        budget = 600 if config.trigger == "limit" else 180
        final = job.result(timeout_s=budget, progress=progress, output=work / "losses.json")
    finally:
        job.cancel()  # a no-op for a finished job; never leave one queued
    progress.update(2, 3, "the same training in one go")
    ref = train_uninterrupted(config.steps, config.seed)
    got = torch.load(work / "final.pt")
    events = read_events(work)
    starts = {e["attempt"]: e["at"] for e in events if e["event"] == "start"}
    ckpts = [e for e in events if e["event"] == "checkpoint"]
    summary = {
        "kind": "summary",
        "job_id": job.job_id,
        "trigger": config.trigger,
        "requeues": final.restarts,
        "attempts": len(starts),
        "final_params_max_diff": float((got - ref).abs().max()),
        "checkpoint_mb": ckpts[0]["mb"] if ckpts else 0.0,
        "checkpoint_mb_per_s": min((c["mb_per_s"] for c in ckpts), default=0.0),
        "requeue_gap_s": max(
            (
                starts[c["attempt"] + 1] - c["signal_at"]
                for c in ckpts
                if c["attempt"] + 1 in starts
            ),
            default=0.0,
        ),
    }
    if config.trigger == "limit" and ckpts:
        first = ckpts[0]
        summary["signal_before_limit_s"] = starts[first["attempt"]] + 60 - first["signal_at"]
    losses = json.loads((work / "losses.json").read_text())
    records = [summary] + [
        {"kind": "loss", "step": s, "loss": v, "attempt": a} for s, v, a in losses
    ]
    progress.update(3, 3, "done")
    return make_result("requeue", config, records, ran_elsewhere=True)
