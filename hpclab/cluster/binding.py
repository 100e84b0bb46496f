"""Process binding: which cores each rank of a job may run on (chapter 07, section 6).

A job gets cores; *binding* says which of them each task (rank) may run on. Unbound, the
kernel may put two busy ranks on one core while another core idles, and every thread library
in a rank (OpenMP in torch, MKL, BLAS) starts one thread per core it can see. Slurm binds
tasks with ``srun --cpu-bind`` (``cores``: each task on its own cores; ``map_cpu:0,1``: task
*i* on CPU *i* of the list; ``verbose`` prints each mask), and ``--hint=nomultithread`` gives
whole cores, not hardware threads, on nodes with SMT; ``--gpus-per-task=1 --gpu-bind=closest``
gives each rank the GPU nearest its cores. Open MPI's equivalent is Guan 2019's
launch line ``mpirun -bind-to core -map-by slot:PE=16 -report-bindings``: each rank bound to
cores, ``PE=16`` processing elements (cores) per rank in slot order, and the masks printed at
start: one rank per 16 cores, whose 16 threads never migrate onto another rank's cores.

Slurm 22.05 changed one thing every job script must now say: ``srun`` no longer inherits the
job's ``--cpus-per-task`` (the ``SLURM_CPUS_PER_TASK`` of ``sbatch``), so a step would bind
each task to one CPU unless the script passes it on with ``SRUN_CPUS_PER_TASK``. The lines
:data:`BIND_LINES` go into every job script this library writes (:func:`~hpclab.cluster.script.render`):
that variable, one OpenMP/torch thread per core of a task, and cores as the binding unit.

The worker (``python -m hpclab.cluster.binding OUT WORK THREADS``) runs a fixed amount of
single-node compute (``WORK`` 256x256 fp32 matrix products with ``THREADS`` torch threads) and
writes its CPU mask and seconds as JSON to ``OUT``; :func:`binding_commands` runs two of them
under ``srun`` with the binding asked for. ``benchmarks/binding.py`` compares the layouts.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path

BIND_LINES = [
    "# binding: srun >= 22.05 no longer inherits --cpus-per-task from the job: pass it on",
    "export SRUN_CPUS_PER_TASK=${SLURM_CPUS_PER_TASK:-1}",
    "export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}  # one thread per core of a task",
    "export SLURM_CPU_BIND=cores  # srun binds each task to its own cores",
]

# Layouts of two ranks on one node: srun's --cpu-bind value for each.
LAYOUTS = {"same core": "map_cpu:0,0", "own cores": "cores"}


def mask(cpus: Iterable[int]) -> str:
    """The hex CPU mask of ``cpus`` as Slurm and taskset print it ({0, 2} -> "0x5")."""
    return hex(sum(1 << c for c in set(cpus)))


def cpu_list(cpus: Iterable[int]) -> str:
    """``cpus`` as ranges, the way /proc and ``taskset -c`` write them ({0,1,2,5} -> "0-2,5")."""
    out, run = [], []
    for c in sorted(set(cpus)):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def binding_commands(layout: str, work: int, threads: int, out_dir: str) -> list[str]:
    """Two ranks on one node, bound as ``layout`` says (a key of :data:`LAYOUTS`)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r} is unknown; allowed: {', '.join(LAYOUTS)}")
    from hpclab.cluster.runner import python  # runner -> script -> this module: import late

    out = f"{out_dir}/rank-%t.json"  # the worker puts its rank for %t
    return [
        f"srun --ntasks=2 --cpu-bind=verbose,{LAYOUTS[layout]} --output={out_dir}/srun-%t.log "
        f"{python()} -m hpclab.cluster.binding {out} {work} {threads}"
    ]


def read_ranks(out_dir: Path) -> list[dict]:
    """The two ranks' reports, by rank."""
    return [json.loads(p.read_text()) for p in sorted(Path(out_dir).glob("rank-*.json"))]


# (layout, torch threads per rank): the cases of chapter 07's section 6 and the benchmark
CASES = (("same core", 1), ("own cores", 1), ("own cores", 2))
QUICK_CASES = (("same core", 0), ("own cores", 0))  # pure Python: no torch import per rank


def run_binding(cluster, site, work: int, cases=CASES) -> list[dict]:  # noqa: ANN001
    """One job of two ranks on one node (one core each) that runs each case as a step; one
    record per rank and case: its CPUs, mask, torch threads and seconds for ``work`` products."""
    from hpclab.cluster.runner import new_workdir, submit
    from hpclab.cluster.spec import JobSpec

    root = new_workdir("binding")
    cmds = []
    for i, (layout, threads) in enumerate(cases):
        (root / f"case{i}").mkdir(mode=0o700)
        cmds += binding_commands(layout, work, threads, str(root / f"case{i}"))
    spec = JobSpec(name="binding", ntasks_per_node=2, cpus_per_task=1, mem="1G")
    submit(cluster, site, spec, cmds, workdir=root).result(timeout_s=300)
    return [
        {"step": i, "layout": layout, **rank}
        for i, (layout, _) in enumerate(cases)
        for rank in read_ranks(root / f"case{i}")
    ]


def binding_table(records: list[dict]):  # noqa: ANN201 - a pandas DataFrame
    """The records as a table: case, rank, its CPUs and mask, wall and CPU seconds."""
    import pandas as pd

    rows = [
        {"layout": r["layout"], "threads": r["threads"], "rank": r["rank"]}
        | {"cpus": cpu_list(r["cpus"]), "mask": r["mask"]}
        | {"seconds": round(r["seconds"], 2), "cpu_s": round(r["cpu_s"], 2)}
        for r in records
    ]
    return pd.DataFrame(rows).set_index(["layout", "threads", "rank"])


def slowdown(records: list[dict], case: tuple[str, int], base: tuple[str, int]) -> float:
    """The slowest rank's seconds in ``case`` over those in ``base`` (a case run in several
    steps counts its best step: other users' load only ever slows a step down)."""

    def best(c: tuple[str, int]) -> float:
        steps: dict[int, float] = {}
        for r in records:
            if (r["layout"], r["threads"]) == c:
                steps[r["step"]] = max(steps.get(r["step"], 0.0), r["seconds"])
        return min(steps.values())

    return best(case) / best(base)


def spin(work: int, threads: int) -> float:
    """Seconds for ``work`` 256x256 fp32 products on ``threads`` torch threads (after a warm-up);
    ``threads=0``: the same count of pure-Python loops of 20 000 additions, without importing
    torch (a quick case: a rank's start costs no torch import)."""
    if threads == 0:
        t0 = time.perf_counter()
        x = 0
        for _ in range(work):
            for i in range(20000):
                x += i
        return time.perf_counter() - t0
    import torch

    torch.set_num_threads(threads)
    a = torch.randn(256, 256)
    torch.mm(a, a)
    t0 = time.perf_counter()
    for _ in range(work):
        torch.mm(a, a)
    return time.perf_counter() - t0


def main(argv: list[str]) -> None:
    out, work, threads = argv[0], int(argv[1]), int(argv[2])
    rank = os.environ.get("SLURM_PROCID", "0")
    before = sorted(os.sched_getaffinity(0))
    cpu0 = time.process_time()
    seconds = spin(work, threads)
    # CPU seconds beside wall seconds: a rank sharing its core (with a peer or other users'
    # processes) gets its CPU time spread over a longer wall time
    cpu_s = time.process_time() - cpu0
    report = {"rank": int(rank), "cpus": before, "mask": mask(before), "seconds": seconds}
    report["cpu_s"] = cpu_s
    report |= {"threads": threads, "node": os.environ.get("SLURMD_NODENAME", "")}
    Path(out.replace("%t", rank)).write_text(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
