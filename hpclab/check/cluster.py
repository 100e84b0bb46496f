"""Checks for chapter 07's exercises: a job request, an atomic checkpoint, a job array plan."""

from __future__ import annotations

import math
import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hpclab.check import CheckResult, exercise_check, failed, passed
from hpclab.check.save_probe import Protocol, Step
from hpclab.cluster import profiles
from hpclab.cluster.script import parse_header, render
from hpclab.cluster.spec import JobSpec, array_indices
from hpclab.config import ConfigError

# Exercise (a): the stated need.
NEED = {"nodes": 2, "gpus_per_node": 2, "cpus_per_task": 8, "minutes": 30, "account": "def-smith"}


@exercise_check
def check_jobspec(spec: Any, site: str = "alliance") -> CheckResult:
    """2 nodes x 2 GPUs, one task per GPU with 8 cores each, 30 minutes, account def-smith."""
    if not isinstance(spec, JobSpec):
        return failed(f"expected a JobSpec(...), got {type(spec).__name__}")
    if spec.nodes != NEED["nodes"]:
        return failed(f"nodes={spec.nodes}: the need is spread over {NEED['nodes']} nodes")
    if spec.gpus_per_node != NEED["gpus_per_node"]:
        return failed(
            f"gpus_per_node={spec.gpus_per_node}: it counts the GPUs on each node, "
            f"so the job would get {spec.gpus_per_node * spec.nodes} GPUs in all"
        )
    if spec.ntasks_per_node != spec.gpus_per_node:
        return failed(
            f"ntasks_per_node={spec.ntasks_per_node}: the need is one task (one training rank) "
            "per GPU"
        )
    if spec.cpus_per_task != NEED["cpus_per_task"]:
        per_node = spec.cpus_per_task * spec.ntasks_per_node
        return failed(
            f"cpus_per_task={spec.cpus_per_task} gives each node {per_node} cores; "
            "cpus_per_task counts the cores of one task"
        )
    if spec.time_s != NEED["minutes"] * 60:
        return failed(
            f"time={spec.time!r} is {spec.time_s} s; Slurm reads a bare number as minutes "
            "and H:M:S as hours, minutes, seconds"
        )
    if spec.account != NEED["account"]:
        return failed(f"account={spec.account!r}: the job must be charged to the stated account")
    try:
        spec.check_site(profiles.load(site))
    except ConfigError as exc:
        return failed(f"the site refuses it: {exc}")
    head = parse_header(render(spec, profiles.load(site), ["srun python train.py"]))
    expect = {"nodes": "2", "ntasks-per-node": "2", "cpus-per-task": "8", "gpus-per-node": "2"}
    wrong = {k: head.get(k) for k, v in expect.items() if head.get(k) != v}
    if wrong:
        return failed(f"the generated #SBATCH lines disagree: {wrong}")
    return passed(
        "2 nodes x 2 GPUs, 2 tasks of 8 cores per node, 30 minutes, charged to def-smith: "
        "the #SBATCH lines read back the same"
    )


# Exercise (b): an atomic checkpoint writer save(obj, path).


def _ckpt(step: int) -> dict[str, Any]:
    import torch

    return {"step": step, "w": torch.arange(4.0) + step}


def _write_in_child(save: Callable, big: Any, path: str) -> None:
    save({"step": 2, "big": big}, path)


def _write_killed(save: Callable, path: str, point: int) -> None:
    with Protocol(kill_at=point):
        save(_ckpt(2), path)


def _loads(path: str) -> tuple[int | None, str]:
    """The step of the checkpoint at ``path``, or None and why it could not be read."""
    import torch

    if not os.path.exists(path):
        return None, f"{os.path.basename(path)} did not exist"
    try:
        return torch.load(path, weights_only=False).get("step"), ""
    except Exception:  # noqa: BLE001 - any unreadable file is the finding
        return None, f"{os.path.basename(path)} could not be loaded (a torn file)"


def _same(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def _protocol(steps: list[Step], path: str) -> CheckResult | None:
    """The durable-write protocol, read from the recorded steps of one save over an old file."""
    name = os.path.basename(path)
    if not any(s.name == "fsync" for s in steps):
        return failed(
            "no os.fsync: a rename can reach the disk before the data does, "
            "so after a crash of the node the new name may hold an empty file"
        )
    moves = [
        i
        for i, s in enumerate(steps)
        if s.name in ("replace", "rename")
        and _same(s.target, path)
        and _same(os.path.dirname(os.path.abspath(s.path)), os.path.dirname(path))
    ]
    if not moves:
        return failed(
            "the final name must appear in one os.replace (or os.rename) of a file written "
            "in the same directory; a copy from elsewhere is not atomic"
        )
    last = moves[-1]
    moved = steps[last]
    if any(s.name in ("remove", "unlink") and _same(s.path, path) for s in steps[:last]):
        return failed(
            f"you remove the old {name} before the rename: a crash between the two leaves no "
            "checkpoint at all. os.replace swaps the new file in over the old one in one step"
        )
    synced = [s for s in steps[:last] if s.name == "fsync" and s.inode == moved.inode]
    if not synced:
        if any(s.name == "fsync" and s.inode == moved.inode for s in steps[last + 1 :]):
            return failed(
                "os.fsync comes after the rename: until then the new name can point at data "
                "still in the page cache. fsync the temporary file, then rename it"
            )
        what = (
            "a directory" if all(s.is_dir for s in steps if s.name == "fsync") else "another file"
        )
        return failed(
            f"os.fsync ran on {what}, not on the temporary file that becomes {name}: fsync that "
            "file's descriptor once it is written, before the rename"
        )
    if max(s.size for s in synced) < moved.size:
        size = max(s.size for s in synced)
        return failed(
            f"os.fsync ran when {size} of the file's {moved.size} bytes had reached it: the "
            "rest was still in Python's buffer. Call f.flush() before os.fsync(f.fileno())"
        )
    return None


@exercise_check
def check_atomic_save(save: Callable[[Any, str], Any]) -> CheckResult:
    """``save(obj, path)`` over an existing checkpoint must write a temporary file in the same
    directory, fsync it once all its bytes are written, and rename it over the old one, removing
    nothing first. Then a ``kill -9`` at every step of that protocol, and one while a large
    checkpoint's bytes are being written, must leave a complete checkpoint (old or new)."""
    if not callable(save):
        return failed(f"pass your function save itself, got {type(save).__name__}")
    with tempfile.TemporaryDirectory(prefix="hpclab-ckpt-check-") as d:
        path = os.path.join(d, "ckpt.pt")
        trace = _traced_save(save, path)
        if isinstance(trace, CheckResult):
            return trace
        wrong = _protocol(trace.steps, path)
        if wrong is None:
            wrong = _killed_at_each_step(save, path, trace)
        if wrong is None:
            wrong = _killed_mid_write(save, path)
        if wrong is not None:
            return wrong
    return passed(
        "written to a temporary file, fsynced, renamed in one step: a kill -9 during the write "
        "leaves the previous checkpoint loadable"
    )


def _traced_save(save: Callable[[Any, str], Any], path: str) -> Protocol | CheckResult:
    """The system calls of ``save`` replacing an existing checkpoint at ``path``, once what it
    wrote loads back; else why not."""
    import torch

    try:
        save(_ckpt(0), path)  # the old checkpoint the next save replaces
        with Protocol() as trace:
            save(_ckpt(1), path)
    except Exception as exc:
        return failed(f"save raised {type(exc).__name__}: {exc}")
    try:
        back = torch.load(path, weights_only=False)
    except Exception as exc:
        return failed(f"torch.load could not read what save wrote to {path}: {exc}")
    if back.get("step") != 1 or not torch.equal(back.get("w"), _ckpt(1)["w"]):
        return failed("torch.load(path) does not give back the saved dict")
    return trace


def _killed_at_each_step(
    save: Callable[[Any, str], Any], path: str, trace: Protocol
) -> CheckResult | None:
    """kill -9 at every step boundary of the protocol (before and after each call): the name
    must hold a complete checkpoint each time."""
    for point in range(2 * len(trace.steps)):
        proc = multiprocessing.get_context("fork").Process(
            target=_write_killed, args=(save, path, point)
        )
        proc.start()
        proc.join(60)
        if proc.is_alive():
            proc.kill()
            proc.join()
        step, why = _loads(path)
        if step not in (1, 2):
            return failed(
                f"after kill -9 {trace.window(point)}, {why or 'it held another checkpoint'}:"
                " at every moment the name must hold a complete checkpoint, old or new"
            )
    return None


def _killed_mid_write(save: Callable[[Any, str], Any], path: str) -> CheckResult | None:
    """kill -9 while a large checkpoint's bytes are being written: the old one must still load."""
    import torch

    big = torch.zeros(150_000_000, dtype=torch.uint8)
    folder = Path(path).parent
    before = {p.name: p.stat().st_size for p in folder.iterdir()}
    proc = multiprocessing.get_context("fork").Process(
        target=_write_in_child, args=(save, big, path)
    )
    proc.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.is_alive():
        now = {p.name: p.stat().st_size for p in folder.iterdir() if p.exists()}
        if any(now.get(k) != v for k, v in before.items()) or set(now) - set(before):
            break
        time.sleep(0.002)
    proc.kill()
    proc.join()
    step, why = _loads(path)
    if step is None:
        return failed(
            f"after kill -9 during the write, {why}: the final name was being written in place"
        )
    if step not in (1, 2):
        return failed(
            "after kill -9 the file held a different checkpoint than the last complete one"
        )
    return None


# Exercise (c): --array and its throttle for N trials on K GPUs (one GPU per trial).
# (20, 4) and (7, 2): N // K is not K (at 16/4 and 10/3 it is); (6, 8): more GPUs than trials
CASES = ((16, 4), (10, 3), (20, 4), (7, 2), (6, 8), (1, 1))


@exercise_check
def check_array_plan(plan: Callable[[int, int], str], trial_minutes: float = 20.0) -> CheckResult:
    """``plan(n_trials, gpus)`` returns the ``--array`` value; checked by the wall-time model."""
    for n, k in CASES:
        try:
            text = str(plan(n, k))
            spec = JobSpec(array=text)
        except ConfigError as exc:
            return failed(f"plan({n}, {k}): {exc}")
        except Exception as exc:
            return failed(f"plan({n}, {k}) raised {type(exc).__name__}: {exc}")
        ids = array_indices(spec.array)
        if sorted(ids) != list(range(n)):
            return failed(
                f"plan({n}, {k}) = {text!r} runs task ids {ids[:3]}...{ids[-1:]} ({len(ids)} tasks); "
                f"trials are numbered 0..{n - 1} and both ends of a Slurm range are included"
            )
        if "%" not in text:
            if n <= k:
                continue  # every task has a GPU: no throttle needed
            return failed(
                f"plan({n}, {k}) = {text!r} has no %throttle: all {n} tasks may start at once "
                f"although only {k} GPUs are yours"
            )
        throttle = int(text.split("%")[1])
        if throttle < 1:
            return failed(f"plan({n}, {k}) = {text!r}: a throttle of %{throttle} runs no task")
        if throttle > k and throttle < n:
            return failed(
                f"plan({n}, {k}) = {text!r} lets {throttle} tasks run at once on {k} GPUs"
            )
        best = math.ceil(n / k) * trial_minutes
        got = math.ceil(n / min(throttle, n)) * trial_minutes
        if got > best:
            return failed(
                f"plan({n}, {k}) = {text!r}: the wall-time model gives {got:g} min "
                f"(ceil(N/throttle) waves of {trial_minutes:g} min); {k} GPUs allow less"
            )
    return passed(
        "every trial once, never more tasks at once than GPUs, and the shortest modelled wall "
        f"time: ceil(N/K) x {trial_minutes:g} min"
    )


# Exercise (e), what a run costs, has its own module; it is one of this chapter's checks.
from hpclab.check.cluster_cost import check_run_cost  # noqa: E402, F401
