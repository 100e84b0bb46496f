"""py-spy: a sampling profiler from outside the process, for a job that is already running
(chapter 03).

py-spy reads the Python stacks of another process from its memory, ~100 times a second, without
touching the interpreter: ~1.0x overhead, and it needs no change to the job. Attaching to a
running PID uses ``ptrace``; where the kernel forbids it (``/proc/sys/kernel/yama/ptrace_scope``
>= 1 and not your child, or a container without ``CAP_SYS_PTRACE``), start the job under py-spy
instead (``py-spy record -o out.txt -f raw -- python train.py``). In a Slurm job:
``srun --overlap --jobid JOBID py-spy dump --pid PID`` runs it on the job's node.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

CHILD = "hpclab.profiling.pyspy_tool"  # python -m CHILD STEPS FAULTS: the patient, then JSON


def executable() -> str | None:
    """py-spy beside this interpreter (a venv's bin/, often not on PATH), else on PATH."""
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.exists() else shutil.which("py-spy")


def available() -> str:
    """Empty when py-spy can run here, else one line saying why not."""
    if executable() is None:
        return "py-spy is not installed (pip install py-spy)"
    return ""


def ptrace_note() -> str:
    """One line about attaching to a running PID on this machine."""
    path = Path("/proc/sys/kernel/yama/ptrace_scope")
    try:
        scope = int(path.read_text())
    except (OSError, ValueError):
        return "no Yama ptrace restriction here: py-spy may attach to your own processes"
    if scope == 0:
        return "ptrace_scope=0: py-spy may attach to any of your processes"
    return (
        f"ptrace_scope={scope}: attaching to a running PID is forbidden here; "
        "start the run under py-spy instead (py-spy record -- python ...)"
    )


def child_command(steps: int, faults: str = "slow-data") -> list[str]:
    return [sys.executable, "-m", CHILD, str(steps), faults]


def child_env() -> dict[str, str]:
    """This environment with the project on PYTHONPATH: what a profiled child needs."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def start_patient(
    steps: int = 100_000, faults: str = "slow-data", timeout_s: float = 120.0
) -> subprocess.Popen:
    """A long training run in a child process (a stand-in for a job started elsewhere);
    returns once it is training (past its imports and warm-up). Stop it with ``.kill()``."""
    proc = subprocess.Popen(
        child_command(steps, faults),
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = proc.stdout.readline() if proc.stdout else ""  # "training" after the warm-up
    if line.strip() != "training":
        proc.kill()
        proc.wait(timeout=timeout_s)
        raise RuntimeError(f"the training process did not start (exit code {proc.returncode})")
    return proc


ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # terminal colour and style codes


def dump(pid: int, timeout_s: float = 30.0, local_vars: bool = False) -> str:
    """``py-spy dump --pid PID``: every thread's current Python stack, as plain text (with each
    frame's local variables when ``local_vars``: ``--locals``). Colours are stripped: inside a
    Jupyter kernel (``FORCE_COLOR``/``CLICOLOR_FORCE`` set) py-spy colours its output, and
    every name and line number came wrapped in escape codes no reader could match."""
    out = subprocess.run(
        [
            executable() or "py-spy",
            "dump",
            "--pid",
            str(pid),
            *(["--locals"] if local_vars else []),
        ],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    if out.returncode != 0:
        raise RuntimeError(f"py-spy dump failed: {out.stderr.strip().splitlines()[-1:]}")
    return ANSI.sub("", out.stdout)


def record(cmd: list[str], out: str | os.PathLike, rate: int = 100, timeout_s: float = 300.0):
    """``py-spy record -f raw`` around ``cmd``; returns the child's stdout (it is not profiled
    output: py-spy writes the samples to ``out``)."""
    full = [
        executable() or "py-spy",
        "record",
        "--rate",
        str(rate),
        "-f",
        "raw",
        "-o",
        str(out),
        "--",
        *cmd,
    ]
    res = subprocess.run(full, capture_output=True, text=True, timeout=timeout_s, env=child_env())
    if res.returncode != 0:
        raise RuntimeError(f"py-spy record failed: {res.stderr.strip()[-300:]}")
    return res.stdout


def top_functions(raw_path: str | os.PathLike, top: int = 10) -> list[dict[str, Any]]:
    """From py-spy's collapsed stacks (``frame;frame;frame COUNT``): the functions on top of
    the stack most often (self samples) with their share."""
    counts: collections.Counter[str] = collections.Counter()
    total = 0
    for line in Path(raw_path).read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        counts[stack.split(";")[-1]] += int(n)
        total += int(n)
    return [
        {"function": f, "samples": n, "self_share": n / total} for f, n in counts.most_common(top)
    ]


def _child(steps: int, faults: str) -> None:
    """Run the patient and print its own timing as JSON (so py-spy's cost is measured inside)."""
    import json

    from hpclab.profiling.patient import train

    train(faults, steps=min(steps, 10))  # warm-up: imports, first allocations
    print("training", flush=True)
    run = train(faults, steps=steps)
    print(json.dumps({"seconds": run.seconds, "final_loss": run.final_loss}), flush=True)


if __name__ == "__main__":
    _child(int(sys.argv[1]), sys.argv[2])
