"""Job scripts written from a :class:`JobSpec` and a site profile (chapter 07).

A job script is a shell script whose ``#SBATCH`` lines are the requests (read by ``sbatch``
before the script runs) followed by the work. :func:`render` writes it the way the site expects
(its account format, how GPUs are asked for, its module/virtualenv setup, its node-local scratch)
so a student reads exactly what will be submitted before submitting it. :func:`parse_header`
reads the ``#SBATCH`` lines of any script back into options (used by the exercise checks).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from hpclab.cluster.binding import BIND_LINES
from hpclab.cluster.profiles import SiteProfile
from hpclab.cluster.spec import JobSpec


def directives(spec: JobSpec, site: SiteProfile) -> list[str]:
    """The ``#SBATCH`` options for ``spec`` at ``site`` (without the ``#SBATCH`` prefix)."""
    out = [f"--job-name={spec.name}", f"--nodes={spec.nodes}"]
    out.append(f"--ntasks-per-node={spec.ntasks_per_node}")
    out.append(f"--cpus-per-task={spec.cpus_per_task}")
    if spec.gpus_per_node:
        out.append(site.gpu_option.format(gpus=spec.gpus_per_node))
    out.append(f"--time={spec.time}")
    out.append(f"--mem={spec.mem}")
    if spec.partition:
        out.append(site.partition_option.format(partition=spec.partition))
    if spec.account:
        out.append(f"--account={spec.account}")
    out.extend(site.extra_directives)
    if spec.array:
        out.append(f"--array={spec.array}")
    if spec.signal:
        out.append(f"--signal={spec.signal}")
    if spec.requeue:
        out.append("--requeue")
    if spec.dependency:
        out.append(f"--dependency={spec.dependency}")
    return out


def render(
    spec: JobSpec,
    site: SiteProfile,
    commands: Sequence[str],
    *,
    output: str = "slurm-%j.out",
    env: dict[str, str] | None = None,
) -> str:
    """The whole job script: shebang, ``#SBATCH`` lines, setup, scratch, then ``commands``."""
    lines = ["#!/bin/bash"]
    lines += [f"#SBATCH {d}" for d in directives(spec, site)]
    # Array tasks: %A is the array's id and %a the task's (%j would give every task its own id).
    out = output.replace("%j", "%A_%a") if spec.array else output
    lines.append(f"#SBATCH --output={out}")
    lines.append(f"# site: {site.name} ({site.title}); checked {site.checked}")
    lines.append("set -euo pipefail")
    lines.append("umask 077  # files the job writes are its user's alone")
    for key, value in (env or {}).items():
        lines.append(f"export {key}={shlex.quote(value)}")
    lines += list(site.setup)
    lines += BIND_LINES
    # node-local scratch: fast disk private to the job (Guan 2019, Mao 2017: stage data there)
    lines.append(f'export SLURM_TMPDIR="{site.tmpdir}"')
    lines.append('mkdir -p -m 0700 "$SLURM_TMPDIR"')  # private to its user
    lines.append('echo "job $SLURM_JOB_ID on $(hostname) nodes=$SLURM_JOB_NODELIST"')
    lines += list(commands)
    return "\n".join(lines) + "\n"


def parse_header(script: str) -> dict[str, str]:
    """``#SBATCH`` options of ``script`` as {long option name: value} ("-N 2" -> nodes: "2").

    Stops at the first line that is not a comment or blank, as sbatch does.
    """
    short = {"N": "nodes", "n": "ntasks", "c": "cpus-per-task", "t": "time", "p": "partition"}
    short |= {"A": "account", "J": "job-name", "G": "gpus", "a": "array", "C": "constraint"}
    short |= {"o": "output", "e": "error", "q": "qos"}
    out: dict[str, str] = {}
    for raw in script.splitlines()[1:] if script.startswith("#!") else script.splitlines():
        line = raw.strip()
        if not line:
            continue
        if not line.startswith("#"):
            break
        if not line.startswith("#SBATCH"):
            continue
        words = shlex.split(line[len("#SBATCH") :], comments=True)
        i = 0
        while i < len(words):
            word = words[i]
            if word.startswith("--"):
                key, eq, value = word[2:].partition("=")
                if not eq:
                    nxt = words[i + 1] if i + 1 < len(words) else ""
                    if nxt and not nxt.startswith("-"):
                        value, i = nxt, i + 1
                out[key] = value
            elif word.startswith("-") and len(word) >= 2:
                key = short.get(word[1], word[1])
                value = word[2:] if len(word) > 2 else (words[i + 1] if i + 1 < len(words) else "")
                if len(word) == 2:
                    i += 1
                out[key] = value.lstrip("=")
            i += 1
    return out
