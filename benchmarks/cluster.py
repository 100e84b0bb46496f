"""Chapter 07 on the local Slurm: hpclab's job API vs plain sbatch, a job array vs serial tasks.

Side by side in one run (python benchmarks/cluster.py; starts the local Slurm as root if none is
up, and stops what it started):

1. Submission overhead: the same 1-second job from ``sbatch`` to its end, through
   :class:`hpclab.cluster.slurm.Cluster` (submit + wait) and through plain ``sbatch --parsable``
   + polling ``squeue`` every 0.2 s; interleaved, median of 3 each. Goal: within 10%.
2. A job array of 8 tasks of 1 s each, 4 at a time, vs the same 8 tasks one after another in one
   job (DESIGN: 16 x 0.5 s on 2 CPUs took 8.7 s). Goal: the array >= 2x faster.
3. Two-node DDP (2 nodes x 2 ranks, tiny model, batch 32 per rank): median step time of
   ``hpclab run ddp-multinode``'s job vs the same ``srun torchrun`` command written by hand around
   the plain tutorial-style script ``benchmarks/ddp_torchrun_plain.py``. Goal: within 10%.
4. Reported without a goal: checkpoint write speed (MB/s, 100 MB, write + fsync + rename).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hpclab.cluster import local  # noqa: E402
from hpclab.cluster.checkpoint import save_checkpoint  # noqa: E402
from hpclab.cluster.runner import submit  # noqa: E402
from hpclab.cluster.spec import JobSpec  # noqa: E402


def via_api(cluster, site, work: Path) -> float:
    t0 = time.monotonic()
    job = submit(cluster, site, JobSpec(name="bench"), ["sleep 1"], workdir=work)
    job.result(timeout_s=60)
    return time.monotonic() - t0


def via_plain(cluster, work: Path) -> float:
    work.mkdir(parents=True, exist_ok=True)
    script = work / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --time=10 --mem=1G\nsleep 1\n")
    env = cluster.env()
    t0 = time.monotonic()
    out = subprocess.run(
        ["sbatch", "--parsable", f"--chdir={work}", str(script)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    job = out.stdout.strip()
    while subprocess.run(
        ["squeue", "-h", "-j", job, "-o", "%T"], env=env, capture_output=True, text=True
    ).stdout.strip():
        time.sleep(0.2)
    return time.monotonic() - t0


def array_vs_serial(cluster, site, root: Path) -> tuple[float, float]:
    t0 = time.monotonic()
    spec = JobSpec(name="bench-array", array="0-7%4", mem="256M")
    submit(cluster, site, spec, ["sleep 1"], workdir=root / "array").result(timeout_s=120)
    array_s = time.monotonic() - t0
    t0 = time.monotonic()
    loop = ["for i in $(seq 0 7); do sleep 1; done"]
    submit(
        cluster, site, JobSpec(name="bench-serial", mem="256M"), loop, workdir=root / "serial"
    ).result(timeout_s=120)
    return array_s, time.monotonic() - t0


PLAIN = """#!/bin/bash
#SBATCH --nodes=2 --ntasks-per-node=1 --cpus-per-task=2 --time=10 --mem=1G
export GLOO_SOCKET_IFNAME=lo PYTHONPATH={root} TMPDIR=/tmp
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
addr=$(scontrol show node "$head" -o | sed -n 's/.* NodeAddr=\\([^ ]*\\).*/\\1/p')
srun {py} -m torch.distributed.run --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d \\
  --rdzv-endpoint=$addr:{port} --rdzv-id=$SLURM_JOB_ID {root}/benchmarks/ddp_torchrun_plain.py tiny 32 {steps} 3
"""


def ddp_vs_plain(cluster, site, root: Path, steps: int = 30) -> tuple[float, float]:
    import json
    import socket

    from hpclab.cluster.multinode import MultinodeConfig, run_layout, train_spec
    from hpclab.progress import Progress

    spec = train_spec(MultinodeConfig(per_rank_batch=32, steps=steps))
    ours = run_layout(cluster, site, spec, 2, 2, Progress())["step_s"]
    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    repo = Path(__file__).resolve().parents[1]
    text = PLAIN.format(root=repo, py=sys.executable, port=port, steps=steps)
    job = cluster.submit(text, root / "plain-ddp")
    job.result(timeout_s=300)
    line = next(ln for ln in job.log().splitlines() if ln.startswith("{"))
    return ours, json.loads(line)["step_s"]


def measure(cluster, root: Path) -> None:
    """Every comparison on ``cluster``, its lines printed, goals last."""
    site = local.site_profile(cluster)
    api, plain = [], []
    for i in range(3):
        api.append(via_api(cluster, site, root / f"api{i}"))
        plain.append(via_plain(cluster, root / f"plain{i}"))
    ratio = statistics.median(api) / statistics.median(plain)
    print(
        f"submit->end of a 1 s job: hpclab {statistics.median(api):.2f} s, "
        f"sbatch+squeue {statistics.median(plain):.2f} s (median of 3)"
    )
    array_s, serial_s = array_vs_serial(cluster, site, root)
    print(f"8 x 1 s tasks: array %4 {array_s:.2f} s, one after another {serial_s:.2f} s")
    ours, plain_ddp = ddp_vs_plain(cluster, site, root)
    print(
        f"2 nodes x 2 ranks DDP step: hpclab job {1e3 * ours:.1f} ms, "
        f"hand-written srun torchrun {1e3 * plain_ddp:.1f} ms"
    )
    ck = save_checkpoint(root / "ckpt", 1, {"step": 1, "w": bytearray(100_000_000)})
    print(
        f"checkpoint: {ck['mb']:.0f} MB in {ck['seconds']:.2f} s = {ck['mb_per_s']:.0f} MB/s "
        "(write + fsync + rename)"
    )
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    verdict = "PASS" if ratio <= 1.10 else "FAIL"
    print(f"cluster: submit_overhead_ratio={ratio:.3f} goal<=1.10 {verdict}")
    speedup = serial_s / array_s
    verdict = "PASS" if speedup >= 2.0 else "FAIL"
    print(f"cluster: array_speedup={speedup:.2f} goal>=2.0 {verdict}")
    ddp_ratio = ours / plain_ddp
    verdict = "PASS" if ddp_ratio <= 1.10 else "FAIL"
    print(f"cluster: ddp_step_ratio={ddp_ratio:.3f} goal<=1.10 {verdict}")


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="hpclab-bench-cluster-"))
    try:
        with local.connected() as cluster:
            measure(cluster, root)
    except local.NoSlurm as err:  # no Slurm: nothing can be measured
        print(f"cluster: could not measure: {err}", file=sys.stderr)
        return 1
    finally:
        subprocess.run(["rm", "-rf", str(root)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
