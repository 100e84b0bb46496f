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


def _write_in_child(save: Callable, big: Any, path: str) -> None:
    save({"step": 2, "big": big}, path)


@exercise_check
def check_atomic_save(save: Callable[[Any, str], Any]) -> CheckResult:
    """``save(obj, path)`` must survive ``kill -9`` mid-write, fsync, and rename in one step."""
    import torch

    with tempfile.TemporaryDirectory(prefix="hpclab-ckpt-check-") as d:
        path = os.path.join(d, "ckpt.pt")
        calls: dict[str, list] = {"fsync": [], "rename": []}
        real_fsync, real_replace, real_rename = os.fsync, os.replace, os.rename

        def fsync(fd):
            calls["fsync"].append(fd)
            return real_fsync(fd)

        def replace(src, dst, *a, **k):
            calls["rename"].append((os.fspath(src), os.fspath(dst)))
            return real_replace(src, dst, *a, **k)

        def rename(src, dst, *a, **k):
            calls["rename"].append((os.fspath(src), os.fspath(dst)))
            return real_rename(src, dst, *a, **k)

        os.fsync, os.replace, os.rename = fsync, replace, rename
        try:
            save({"step": 1, "w": torch.arange(4.0)}, path)
        except Exception as exc:
            return failed(f"save raised {type(exc).__name__}: {exc}")
        finally:
            os.fsync, os.replace, os.rename = real_fsync, real_replace, real_rename
        try:
            back = torch.load(path, weights_only=False)
        except Exception as exc:
            return failed(f"torch.load could not read what save wrote to {path}: {exc}")
        if back.get("step") != 1 or not torch.equal(back.get("w"), torch.arange(4.0)):
            return failed("torch.load(path) does not give back the saved dict")
        if not calls["fsync"]:
            return failed(
                "no os.fsync: a rename can reach the disk before the data does, "
                "so after a crash of the node the new name may hold an empty file"
            )
        same_dir = [
            s for s, t in calls["rename"] if Path(t) == Path(path) and Path(s).parent == Path(d)
        ]
        if not same_dir:
            return failed(
                "the final name must appear in one os.replace (or os.rename) of a file written "
                "in the same directory; a copy from elsewhere is not atomic"
            )
        # kill -9 while a large checkpoint is being written: the old one must still load
        big = torch.zeros(150_000_000, dtype=torch.uint8)
        before = {p.name: p.stat().st_size for p in Path(d).iterdir()}
        proc = multiprocessing.get_context("fork").Process(
            target=_write_in_child, args=(save, big, path)
        )
        proc.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.is_alive():
            now = {p.name: p.stat().st_size for p in Path(d).iterdir() if p.exists()}
            if any(now.get(k) != v for k, v in before.items()) or set(now) - set(before):
                break
            time.sleep(0.002)
        proc.kill()
        proc.join()
        try:
            state = torch.load(path, weights_only=False)
        except Exception:
            return failed(
                f"after kill -9 during the write, {os.path.basename(path)} could not be loaded: "
                "the final name was being written in place"
            )
        if state.get("step") != 1:
            return failed(
                "after kill -9 the file held a different checkpoint than the last complete one"
            )
    return passed(
        "written to a temporary file, fsynced, renamed in one step: a kill -9 during the write "
        "leaves the previous checkpoint loadable"
    )


# Exercise (c): --array and its throttle for N trials on K GPUs (one GPU per trial).
CASES = ((16, 4), (10, 3), (6, 8), (1, 1))


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
        if "%" not in text and n > k:  # n <= k: every task may start at once, rightly
            return failed(
                f"plan({n}, {k}) = {text!r} has no %throttle: all {n} tasks may start at once "
                f"although only {k} GPUs are yours"
            )
        throttle = int(text.split("%")[1]) if "%" in text else n
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
