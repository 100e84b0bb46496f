"""Experiment ``ddp-multinode``: chapter 06's DDP training on several nodes (chapter 07, section 2).

The job asks for ``nodes`` nodes with one task each; ``srun`` starts one ``torchrun`` per node
(``--nnodes N --nproc-per-node R``), the torchrun launchers meet (c10d rendezvous), and every
rank runs :func:`hpclab.train.ddp_worker` (the same function chapter 06 launches on one
machine) through :func:`hpclab.dist.torchrun.torchrun_context`. Rank 0 gathers every rank's
result and writes them into the job directory. Any importable worker runs the same way
(chapter 09's ``fsdp --launch slurm`` sends :func:`hpclab.sharding.fsdp_experiment.fsdp_worker`).

Where the launchers meet, and who can reach it:

- **A real cluster** (``store_dir=None``): the rendezvous is torchrun's TCP store on the first
  node (its address from ``scontrol show node``, a free port chosen in the job). That store
  listens on *every* interface of the first node whatever ``--rdzv-endpoint`` says (torchrun
  cannot restrict its listening socket), and it has no authentication: while the job starts,
  anyone who can reach that node's port can join or disturb the rendezvous. Nodes normally
  reach each other on the cluster's internal network, which users outside the cluster cannot
  reach; what an administrator should know is that a job opens one such port on its first
  node for its lifetime (plus gloo's or NCCL's own connections between the ranks), so
  compute nodes should firewall the outside and not be shared with untrusted users.
- **The local cluster** (``store_dir`` = the job's private directory): every "node" is this
  machine, which other users share, so nothing listens for the meeting at all: the launchers
  meet through a ``FileStore`` (``--rdzv-conf store_type=file``), the ranks form their process
  group through another file (``HPCLAB_PG_STORE``, read by :func:`torchrun_context`), torchrun's
  shared TCP store is switched off (``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``) and gloo talks over
  loopback. A file store needs a file system every node sees consistently, which is why a real
  cluster uses the TCP store instead.

Layouts: ``N x R`` (several nodes), ``1 x N*R`` (the same world on one node) and, in this
process, one rank with the combined batch (N*R x the per-rank batch). Records carry
``samples_per_s``, ``step_s`` and ``params_max_diff`` (largest |weight - one process's weight|;
data parallel training equals one process with the combined batch, up to float rounding).

Run by hand: ``python -m hpclab.cluster.multinode TASK_PICKLE OUT_DIR`` under ``torchrun``
(``TASK_PICKLE``: ``(worker, args)`` as :func:`run_layout` writes it).
"""

from __future__ import annotations

import contextlib
import pickle
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from hpclab.cluster import local
from hpclab.cluster.runner import python, require_cluster, submit
from hpclab.cluster.slurm import SlurmError
from hpclab.cluster.spec import JobSpec
from hpclab.config import Config, param
from hpclab.dist.failures import RankError, diagnose
from hpclab.dist.torchrun import torchrun_failures
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.train import TrainSpec, ddp_worker, run_spec

# After a cancel: Slurm's KillWait (5 s on the local cluster, 30 s by default) and a margin
CANCEL_WAIT_S = 60.0


@dataclass(frozen=True)
class MultinodeConfig(Config):
    nodes: int = param(2, min=1, max=64, help="nodes (one torchrun on each)")
    ranks_per_node: int = param(2, min=1, max=8, help="ranks per node (--nproc-per-node)")
    per_rank_batch: int = param(8, min=1, max=4096, help="batch per rank")
    model: str = param("tiny", choices=("tiny", "large"), help="chapter 06's models")
    steps: int = param(20, min=1, max=10000, quick=6, help="timed steps")
    one_node: bool = param(True, quick=False, help="also run the same world on one node")
    seed: int = param(0, min=0, max=2**31 - 1, help="data, shuffle and weight seed")


def train_spec(config: MultinodeConfig) -> TrainSpec:
    return TrainSpec.sized(
        config.nodes * config.ranks_per_node,
        model=config.model,
        per_rank_batch=config.per_rank_batch,
        steps=config.steps,
        warmup=2,
        seed=config.seed,
        measure_compute=False,
        measure_allreduce=False,
        return_params=True,
    )


def torchrun_commands(
    ranks_per_node: int, module_args: str, store_dir: str | None = None
) -> list[str]:
    """The job's lines: how the torchrun launchers meet, then srun one torchrun per node.

    ``store_dir=None``: torchrun's TCP store on the first node (a real cluster's internal
    network); a directory (the local cluster): file stores there, and no listening socket.
    """
    if store_dir is None:
        meet = [
            'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            # On a cluster NodeAddr is the node's name; on the local cluster it is 127.0.0.1.
            "head_addr=$(scontrol show node \"$head\" -o | sed -n 's/.* NodeAddr=\\([^ ]*\\).*/\\1/p')",
            f"port=$({python()} -c 'import socket; s=socket.socket(); s.bind((\"\", 0)); print(s.getsockname()[1])')",
        ]
        rdzv = "--rdzv-backend=c10d --rdzv-endpoint=$head_addr:$port"
    else:
        meet = [
            # nothing listens: the launchers and the ranks meet through files in the job's
            # private directory (every node of the local cluster is this machine)
            "export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1",
            f"export HPCLAB_PG_STORE={store_dir}/pg.store",
        ]
        rdzv = (
            f"--rdzv-backend=c10d --rdzv-endpoint={store_dir}/rdzv.store "
            "--rdzv-conf=store_type=file"
        )
    return [
        *meet,
        # torchrun keeps its files in TMPDIR: the job's scratch, removed with the job
        'export TMPDIR="$SLURM_TMPDIR"',
        f"srun --ntasks-per-node=1 {python()} -m torch.distributed.run "
        f"--nnodes=$SLURM_JOB_NUM_NODES --nproc-per-node={ranks_per_node} "
        f"{rdzv} --rdzv-id=$SLURM_JOB_ID "
        f"-m hpclab.cluster.multinode {module_args}",
    ]


def job_spec(nodes: int, ranks_per_node: int, cores_per_node: int) -> JobSpec:
    """One task (torchrun) per node, with a core per rank where the node has them."""
    return JobSpec(
        name=f"ddp-{nodes}x{ranks_per_node}",
        nodes=nodes,
        ntasks_per_node=1,
        cpus_per_task=min(ranks_per_node, cores_per_node),
        time="00:10:00",
        mem="1G",
    )


def run_layout(
    cluster, site, spec: TrainSpec, nodes: int, rpn: int, progress: Progress, timeout_s: float = 300
) -> dict:
    """One DDP training job with ``nodes`` x ``rpn`` ranks; rank 0's output and weights."""
    run = run_job(cluster, site, spec, nodes, rpn, progress, timeout_s)
    return {**run["ranks"][0], "job_id": run["job_id"], "restarts": run["restarts"]}


def run_job(
    cluster,
    site,
    spec: Any,
    nodes: int,
    rpn: int,
    progress: Progress,
    timeout_s: float = 300,
    *,
    worker=ddp_worker,
    args: tuple = (),
) -> dict:
    """One job with ``nodes`` x ``rpn`` ranks running ``worker(ctx, spec, *args)``: every
    rank's result (``ranks``, by rank), the job's id and its requeues."""
    from hpclab.cluster.runner import new_workdir

    work = new_workdir(f"ddp-{nodes}x{rpn}")
    # the job's private directory (0700): the worker by reference, its arguments by value
    with open(work / "task.pkl", "wb") as f:
        pickle.dump((worker, (spec, *args)), f)
    store_dir = str(work) if site.name == "local" else None
    cmds = torchrun_commands(rpn, f"{work / 'task.pkl'} {work}", store_dir)
    job = submit(
        cluster, site, job_spec(nodes, rpn, site.partition(None).cpus_per_node), cmds, workdir=work
    )

    # A rank killed by a signal: torchrun on its node reports it at once, while the launcher on
    # another node may wait minutes for its rendezvous to give up. Stop at the first report.
    def rank_died(_st: Any) -> bool:
        return any(not f.peer_loss for f in torchrun_failures(job.log()))

    st = job.wait(timeout_s=timeout_s, progress=progress, stop_when=rank_died)
    failures = torchrun_failures(job.log())
    if failures and (rank_died(st) or st.state != "COMPLETED"):
        job.cancel()
        # Until Slurm has ended the job's processes (TERM, then KILL after KillWait): the error
        # is raised with nothing of the job left running.
        with contextlib.suppress(SlurmError):
            job.wait(timeout_s=CANCEL_WAIT_S)
        # The rank that died first, not the launcher that reported last (often rank 0's).
        blame = diagnose(failures, nodes * rpn, running=[], finished=[], timeout_s=0.0)
        raise RankError(blame.rank, nodes * rpn, blame.summary, consequences=(
            *blame.consequences, f"job {job.job_id} cancelled; its log: {job.log_path()}"),
            raised=False)  # fmt: skip
    state = job.result(timeout_s=60, progress=progress, output=work / "ranks.pt")
    ranks = torch.load(work / "ranks.pt", weights_only=False)  # written by this user's job
    return {"ranks": ranks, "job_id": job.job_id, "restarts": state.restarts}


@dataclass(frozen=True)
class Torchrun:
    """A launch strategy for :func:`hpclab.train.run_spec`: one Slurm job of ``nodes`` nodes,
    ``srun`` one torchrun per node with ``ranks_per_node`` ranks. Each rank runs the worker
    (an importable function: :func:`hpclab.train.ddp_worker` or another) on the spec and its
    arguments (pickled into the job's private directory); torchrun places the ranks, and every
    rank's result comes back, by rank. ``jobs``: the Slurm job ids submitted, in order."""

    cluster: Any
    site: Any
    nodes: int
    ranks_per_node: int
    jobs: list = field(default_factory=list, compare=False)

    def __call__(
        self, worker, ranks, *, args, device, threads, cpus, progress, deadline, timeout_s
    ) -> list[dict]:
        if ranks != self.nodes * self.ranks_per_node:
            raise ValueError(
                f"ranks={ranks}; allowed: nodes x ranks_per_node = "
                f"{self.nodes * self.ranks_per_node}"
            )
        if cpus is not None:
            raise ValueError("cpus=None: torchrun places the ranks on each node")
        run = run_job(
            self.cluster, self.site, args[0], self.nodes, self.ranks_per_node,
            progress or Progress(), 300.0 if deadline is None else deadline,
            worker=worker, args=args[1:],
        )  # fmt: skip
        self.jobs.append(run["job_id"])
        return run["ranks"]


def run_multinode(config: MultinodeConfig, progress: Progress) -> Result:
    cluster = require_cluster()
    site = local.site_profile(cluster)
    spec = train_spec(config)
    world = config.nodes * config.ranks_per_node
    layouts = [(config.nodes, config.ranks_per_node)]
    if config.one_node and config.nodes > 1:
        layouts.append((1, world))
    total = len(layouts) + 1
    progress.update(0, total, "one process with the combined batch")
    serial = run_spec(replace(spec, per_rank_batch=spec.per_rank_batch * world), 1)
    ref = serial[0]["flat_params"]
    records = []
    for i, (n, r) in enumerate(layouts, start=1):
        progress.update(i, total, f"{n} node(s) x {r} ranks")
        job = Torchrun(cluster, site, n, r)
        out = run_spec(spec, n * r, launch=job, deadline=300.0, progress=progress)[0]
        records.append(
            {
                "layout": f"{n}x{r}",
                "nodes": n,
                "ranks_per_node": r,
                "world": n * r,
                "job_id": job.jobs[-1],
                "step_s": out["step_s"],
                "samples_per_s": spec.per_rank_batch * n * r / out["step_s"],
                "params_max_diff": float((out["flat_params"] - ref).abs().max()),
                "replica_max_diff": out["params_max_diff"],
                "loss_last": out["loss_last"],
            }
        )
    records.append(
        {
            "layout": "1 process",
            "nodes": 1,
            "ranks_per_node": 1,
            "world": 1,
            "step_s": serial[0]["step_s"],
            "samples_per_s": spec.per_rank_batch * world / serial[0]["step_s"],
            "params_max_diff": 0.0,
            "loss_last": serial[0]["loss_last"],
        }
    )
    progress.update(total, total, "done")
    return make_result("ddp-multinode", config, records, ran_elsewhere=True)


def main(argv: list[str]) -> None:
    """One rank under torchrun: run the task; every rank's result ends in OUT_DIR/ranks.pt."""
    import torch.distributed as dist

    from hpclab.dist.torchrun import torchrun_context

    with open(argv[0], "rb") as f:
        worker, args = pickle.load(f)  # the job's own private file (run_layout wrote it)
    out_dir = Path(argv[1])
    with torchrun_context() as ctx:
        out = worker(ctx, *args)
        # Each rank saves its own result in the job's directory (on the cluster's shared file
        # system, as ranks.pt must be for the submitter); rank 0 collects them once all have.
        # No gather_object: a rank aborted at exit after one ("terminate called without an
        # active exception", 1 of 4 CI runs), failing a job whose results were all written.
        torch.save(out, out_dir / f"rank{ctx.rank}.pt")
        dist.barrier()
        if ctx.is_main:
            ranks = [
                torch.load(out_dir / f"rank{r}.pt", weights_only=False)  # this job's own files
                for r in range(ctx.world_size)
            ]
            tmp = out_dir / "ranks.pt.tmp"
            torch.save(ranks, tmp)
            tmp.rename(out_dir / "ranks.pt")


if __name__ == "__main__":
    main(sys.argv[1:])
