"""A small typed API over ``sbatch``, ``squeue``, ``scontrol``, ``sacct`` and ``scancel`` (chapter 07).

Why plain commands and not submitit: submitit submits a pickled Python function and hides the
job script, while this chapter's lesson *is* the job script (the student reads it, and can paste
it into a terminal on any cluster); submitit also reads job states from ``sacct``, which needs
the accounting daemon (slurmdbd) that small sites and the local cluster lack (it then reports
UNKNOWN), and it adds a dependency. The five commands are on every Slurm cluster, so the same
calls run in a notebook, the CLI, the tests and the benchmark. (Chapter 08 compares submitit's
array on the same JobSpec: :mod:`hpclab.cluster.submitit_exec`, which waits without ``sacct``.) When a job script must run a
Python function, it runs ``python -m hpclab.cluster.<module>``: importable, like a rank's worker.

A :class:`Cluster` carries the environment the commands need (``SLURM_CONF`` for the local
cluster; nothing on a real one). ``submit`` returns a :class:`Job` that can say its state (and
the scheduler's reason while it is pending), wait for a state while reporting every change,
read its log, and cancel itself; waiting is interrupted by Ctrl-C or a cancelled progress,
and then the job is cancelled too.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hpclab.config import RunError
from hpclab.private import private_dir
from hpclab.progress import Cancelled, Progress

TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")
TERMINAL += ("BOOT_FAIL", "DEADLINE", "PREEMPTED", "REVOKED")


class SlurmError(RunError):
    """A Slurm command failed or a job ended badly: one line first, then details."""


@dataclass(frozen=True)
class JobState:
    job_id: str
    state: str  # PENDING, RUNNING, COMPLETED, ... (first word of JobState)
    reason: str = ""  # why PENDING (Priority, Resources, BeginTime, ...)
    exit_code: str = ""  # "0:0" = exit status : signal
    restarts: int = 0
    nodes: str = ""
    stdout: str = ""

    @property
    def done(self) -> bool:
        return self.state in TERMINAL

    @property
    def exit_status(self) -> int | None:
        head = self.exit_code.split(":")[0]
        return int(head) if head.isdigit() else None


def parse_kv(line: str) -> dict[str, str]:
    """``scontrol show job -o`` output (Key=Value words) as a dict."""
    out: dict[str, str] = {}
    key = None
    for word in line.split():
        k, eq, v = word.partition("=")
        if eq and k and k[0].isupper():
            out[k] = v
            key = k
        elif key:  # a value with spaces (Command, Reason text)
            out[key] += " " + word
    return out


@dataclass
class Cluster:
    """Where jobs go: a Slurm reachable with this environment (``conf``: its SLURM_CONF)."""

    conf: str | None = None
    site: str = "generic"
    local: bool = False
    timeout_s: float = 30.0

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.conf:
            env["SLURM_CONF"] = self.conf
        return env

    def run(self, *args: str, check: bool = True, input: str | None = None) -> str:
        try:
            proc = subprocess.run(
                args,
                env=self.env(),
                capture_output=True,
                text=True,
                input=input,
                timeout=self.timeout_s,
            )
        except FileNotFoundError as exc:
            raise SlurmError(f"{args[0]} is not installed here: no Slurm client") from exc
        except subprocess.TimeoutExpired as exc:
            raise SlurmError(
                f"{' '.join(args[:2])} did not answer in {self.timeout_s:g} s"
            ) from exc
        if check and proc.returncode != 0:
            msg = (proc.stderr or proc.stdout).strip().splitlines()
            raise SlurmError(f"{args[0]} failed: {msg[-1] if msg else proc.returncode}")
        return proc.stdout

    @property
    def poll_s(self) -> float:
        # A real controller serves hundreds of users: poll it gently.
        return 0.2 if self.local else 5.0

    def submit(self, script: str, workdir: str | Path) -> Job:
        """``sbatch`` the script text from ``workdir`` (written there as ``job.sh``)."""
        work = private_dir(workdir)
        path = work / "job.sh"
        path.write_text(script)
        out = self.run("sbatch", "--parsable", f"--chdir={work}", str(path))
        return Job(self, out.strip().split(";")[0], work, script)

    def test_only(self, script: str, workdir: str | Path) -> str:
        """What ``sbatch --test-only`` says of a script (where and when it would start; nothing
        is queued), or a SlurmError with sbatch's reason for refusing it."""
        work = private_dir(workdir)
        path = work / "test.sh"
        path.write_text(script)
        proc = subprocess.run(
            ["sbatch", "--test-only", f"--chdir={work}", str(path)],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=self.timeout_s,
        )
        text = (proc.stderr + proc.stdout).strip()
        if proc.returncode != 0:
            raise SlurmError(f"sbatch --test-only refused the script: {text.splitlines()[-1]}")
        return text

    def queue(self) -> list[dict[str, str]]:
        """Jobs in the queue: id, name, user, state, elapsed, limit, nodes, where or why."""
        cols = ("job_id", "name", "user", "state", "elapsed", "limit", "nodes", "where_or_why")
        text = self.run("squeue", "-h", "-o", "%i|%j|%u|%T|%M|%l|%D|%R")
        return [dict(zip(cols, ln.split("|"), strict=False)) for ln in text.splitlines() if ln]

    def states(self, job_id: str) -> list[JobState]:
        """One state per job (array tasks each have one), from the controller or accounting."""
        text = self.run("scontrol", "show", "job", "-o", job_id, check=False)
        out = []
        for line in text.splitlines():
            kv = parse_kv(line)
            if "JobId" not in kv:
                continue
            jid = kv["JobId"]
            if kv.get("ArrayTaskId") and kv.get("ArrayJobId"):
                jid = f"{kv['ArrayJobId']}_{kv['ArrayTaskId']}"
            out.append(
                JobState(
                    job_id=jid,
                    state=kv.get("JobState", "UNKNOWN").split()[0],
                    reason=kv.get("Reason", "None"),
                    exit_code=kv.get("ExitCode", ""),
                    restarts=int(kv.get("Restarts", "0") or 0),
                    nodes=kv.get("NodeList", ""),
                    stdout=kv.get("StdOut", ""),
                )
            )
        return out or self.accounting(job_id)

    def accounting(self, job_id: str) -> list[JobState]:
        """``sacct`` after the controller forgot the job (``-c``: from the job completion file)."""
        fmt = ["-n", "-P", "-X", "-o", "JobID,State,ExitCode,NodeList", "-j", job_id]
        text = self.run("sacct", *fmt, check=False)
        if not text.strip():
            text = self.run("sacct", "-c", *fmt, check=False)
        out = []
        for line in text.splitlines():
            parts = line.split("|")
            if len(parts) >= 4 and parts[0]:
                state = parts[1].split()[0]
                out.append(JobState(parts[0], state, "", parts[2], 0, parts[3]))
        return out

    def cancel(self, job_id: str) -> None:
        self.run("scancel", job_id, check=False)

    def signal(self, job_id: str, sig: str = "USR2", batch: bool = True) -> None:
        """Send ``sig`` to a running job (``--batch``: to the batch shell, like ``--signal=B:``)."""
        self.run("scancel", f"--signal={sig}", *(["--batch"] if batch else []), job_id)


@dataclass
class Job:
    cluster: Cluster
    job_id: str
    workdir: Path
    script: str
    history: list[tuple[float, str]] = field(default_factory=list)  # (seconds since submit, state)
    submitted_at: float = field(default_factory=time.monotonic)

    def state(self) -> JobState:
        states = self.cluster.states(self.job_id)
        if not states:
            return JobState(self.job_id, "UNKNOWN")
        if len(states) == 1:
            return states[0]
        # an array: its state is the least advanced of its tasks', done only when all are
        order = ("PENDING", "RUNNING", "COMPLETING")
        live = [s for s in states if not s.done]
        pick = (
            min(live, key=lambda s: order.index(s.state) if s.state in order else 9)
            if live
            else None
        )
        bad = [s for s in states if s.done and s.state != "COMPLETED"]
        head = pick or (bad[0] if bad else states[0])
        return JobState(self.job_id, head.state, head.reason, head.exit_code, 0, head.nodes)

    def tasks(self) -> list[JobState]:
        return self.cluster.states(self.job_id)

    def wait(
        self,
        until: tuple[str, ...] = TERMINAL,
        timeout_s: float = 300.0,
        on_change: Callable[[JobState], None] | None = None,
        progress: Progress | None = None,
        stop_when: Callable[[JobState], bool] | None = None,
    ) -> JobState:
        """Poll until the state is in ``until`` (or ``stop_when(state)``); every change is
        recorded in ``history``.

        Ctrl-C, a cancelled ``progress`` or the timeout cancel the job before raising.
        """
        deadline = time.monotonic() + timeout_s
        last = None
        try:
            while True:
                st = self.state()
                key = (st.state, st.reason, st.restarts)
                if key != last:
                    self.history.append((round(time.monotonic() - self.submitted_at, 2), st.state))
                    last = key
                    if on_change:
                        on_change(st)
                if st.state in until or (stop_when is not None and stop_when(st)):
                    return st
                if progress is not None:
                    progress.check()
                if time.monotonic() > deadline:
                    raise SlurmError(
                        f"job {self.job_id} still {st.state} ({st.reason}) after {timeout_s:g} s; cancelled"
                    )
                time.sleep(self.cluster.poll_s)
        except (KeyboardInterrupt, Cancelled, SlurmError):
            self.cancel()
            raise

    def result(
        self, timeout_s: float = 300.0, progress: Progress | None = None, output: Path | None = None
    ) -> JobState:
        """Wait for the end; a job that did not complete raises with its exit code and log tail.

        ``output``: the file the job writes last, once its work is done. A job that wrote it and
        then ended otherwise (its node lost as it finished: NODE_FAIL) is kept, not discarded;
        one that Slurm requeued after it wrote it (a node failure requeues a batch job where
        ``JobRequeue=1``, the default) is cancelled rather than run again. The returned state
        says how the job ended (``restarts`` counts the requeues)."""
        baseline = {"restarts": 0}

        def done_then_requeued(st: JobState) -> bool:
            if output is None or not Path(output).exists():
                baseline["restarts"] = st.restarts  # the attempt that may write it
                return False
            return st.restarts > baseline["restarts"]

        st = self.wait(timeout_s=timeout_s, progress=progress, stop_when=done_then_requeued)
        if not st.done:
            self.cancel()  # its work is in ``output``: no second run of it
        if st.state != "COMPLETED" and not (output is not None and Path(output).exists()):
            raise SlurmError(
                f"job {self.job_id} ended {st.state} with exit code {st.exit_code}; "
                f"last lines of its log:\n{self.log(tail=15)}"
            )
        return st

    def log_path(self) -> Path:
        st = self.cluster.states(self.job_id)
        if st and st[0].stdout:
            return Path(st[0].stdout)
        return self.workdir / f"slurm-{self.job_id}.out"

    def log(self, tail: int | None = None) -> str:
        path = self.log_path()
        try:
            text = path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-tail:]) if tail else text

    def after(self, kind: str = "afterok") -> str:
        """A ``--dependency`` on this job: ``afterok`` (it completed), ``afternotok``, ``afterany``."""
        return f"{kind}:{self.job_id}"

    def cancel(self) -> None:
        if self.job_id:
            self.cluster.cancel(self.job_id)
