"""Benchmark: hpclab's all-reduce figures vs a plain loop of dist.all_reduce (chapter 06).

Both run on 2 gloo ranks at 1, 16 and 64 MiB, side by side *in the same process group*,
alternating round by round: hpclab's rank-side code (``allreduce_worker``, what ``hpclab run
allreduce`` runs: correctness check, warm-up, time_fn's median of samples) and the loop people
write by hand (five warm-up calls, nccl-tests' default, then one perf_counter around ``REPEAT``
calls). Both take the slowest rank, as a collective ends when its slowest rank does.

Why in one process group: gloo over loopback on 2 cores is bimodal at 1 MiB (0.7 ms or 2+ ms
per call, depending on how the ranks' threads happen to be scheduled in that launch), so two
separate launches can differ by 3x for reasons neither side controls. The goal: hpclab's algbw
within 10% of the plain loop's at every size (median of the per-round ratios). Also prints the curve.

Usage: python benchmarks/allreduce.py   (no arguments, ~1 minute on 2 cores)
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from hpclab.ddp.allreduce import algbw_gbps, allreduce_worker, busbw_gbps
from hpclab.ddp.ddp_experiment import preload
from hpclab.dist import RankContext, launch

SIZES = (2**20, 16 * 2**20, 64 * 2**20)
RANKS, REPEAT, ROUNDS = 2, 20, 11


def plain_loop(nbytes: int, repeat: int) -> float:
    """The hand-written loop: seconds per call."""
    import torch.distributed as dist

    buf = torch.zeros(nbytes // 4)
    for _ in range(5):  # nccl-tests' default warm-up count
        dist.all_reduce(buf)
    t0 = time.perf_counter()
    for _ in range(repeat):
        dist.all_reduce(buf)
    return (time.perf_counter() - t0) / repeat


def side_by_side(
    ctx: RankContext, sizes: tuple[int, ...], repeat: int, rounds: int
) -> dict[str, dict[int, list[float]]]:
    """Per size and round: hpclab's seconds per call, then the plain loop's, alternating."""
    out: dict[str, dict[int, list[float]]] = {"hpclab": {}, "plain": {}}
    for _ in range(rounds):
        for s in sizes:
            ours = allreduce_worker(ctx, (s,), repeat)[0]["seconds"]
            out["hpclab"].setdefault(s, []).append(ours)
            out["plain"].setdefault(s, []).append(plain_loop(s, repeat))
    return out


def main() -> int:
    preload()
    try:
        outs = launch(side_by_side, RANKS, args=(SIZES, REPEAT, ROUNDS), device="cpu")
    except Exception as err:  # noqa: BLE001
        print(f"allreduce: could not measure: {err}")
        return 1
    worst = 0.0
    print(f"{RANKS} gloo ranks, {ROUNDS} alternating rounds in one process group")
    for s in SIZES:
        ours = [max(o["hpclab"][s][r] for o in outs) for r in range(ROUNDS)]
        theirs = [max(o["plain"][s][r] for o in outs) for r in range(ROUNDS)]
        t, plain_t = statistics.median(ours), statistics.median(theirs)
        # Each round's pair ran back to back: the median of paired ratios cancels slow drifts.
        ratio = statistics.median(p / o for p, o in zip(theirs, ours, strict=True))
        worst = max(worst, abs(1 - ratio))
        print(
            f"{s / 2**20:>4.0f} MiB: hpclab {t * 1e3:7.2f} ms algbw {algbw_gbps(s, t):.2f} GB/s "
            f"busbw {busbw_gbps(s, t, RANKS):.2f} GB/s | plain "
            f"{plain_t * 1e3:7.2f} ms | algbw ratio {ratio:.3f} | rounds hpclab "
            f"{'/'.join(f'{x * 1e3:.1f}' for x in ours)} plain "
            f"{'/'.join(f'{x * 1e3:.1f}' for x in theirs)} ms"
        )
    verdict = "PASS" if worst <= 0.10 else "FAIL"
    print(f"allreduce: max_deviation_vs_plain={worst:.3f} goal<=0.10 {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
