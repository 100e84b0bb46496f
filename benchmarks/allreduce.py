"""Benchmark: hpclab's all-reduce figures vs a plain loop of dist.all_reduce (chapter 06).

Both run on 2 gloo ranks at 1, 16 and 64 MiB, side by side *in the same process group*,
alternating round by round: hpclab's rank-side code (``allreduce_worker``, what ``hpclab run
allreduce`` runs: correctness check, warm-up, time_fn's median of samples) and the loop people
write by hand (five warm-up calls, nccl-tests' default, then one perf_counter around ``REPEAT``
calls). Both take the slowest rank, as a collective ends when its slowest rank does.

Why in one process group: gloo over loopback on 2 cores is bimodal at 1 MiB (0.7 ms or 2+ ms
per call, depending on how the ranks' threads happen to be scheduled), so two separate launches
can differ by 3x for reasons neither side controls, and even within one launch a round's two
halves can land in different modes. So the measurement is built to give the same verdict run
after run:

- many short rounds (``ROUNDS``), each a few samples per side, so both sides see the same modes;
- the order alternates round by round (hpclab first, then plain first): neither side always
  runs in the other's wake;
- the plain loop times as many calls as hpclab's timed samples hold (``REPEAT`` x
  ``inner_calls``), so both average over windows of the same length;
- the statistic is the median of the per-round paired ratios, which a minority of rounds whose
  halves landed in different modes cannot move; its spread is printed (quartiles, and a 95 %
  confidence interval of the median from order statistics), so a verdict near the goal shows
  as such.

The goal: hpclab's algbw within 10 % of the plain loop's at every size.

Usage: python benchmarks/allreduce.py   (no arguments, ~1-2 minutes on 2 cores)
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from hpclab.ddp.allreduce import algbw_gbps, allreduce_worker, busbw_gbps, inner_calls
from hpclab.dist import RankContext, launch
from hpclab.train import preload

SIZES = (2**20, 16 * 2**20, 64 * 2**20)
RANKS, REPEAT, ROUNDS = 2, 4, 31
GOAL = 0.10


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
    """Per size and round: hpclab's seconds per call and the plain loop's, in alternating order."""
    out: dict[str, dict[int, list[float]]] = {"hpclab": {}, "plain": {}}
    for r in range(rounds):
        for s in sizes:
            sides = ("hpclab", "plain") if r % 2 == 0 else ("plain", "hpclab")
            for side in sides:
                if side == "hpclab":
                    t = allreduce_worker(ctx, (s,), repeat)[0]["seconds"]
                else:
                    t = plain_loop(s, repeat * inner_calls(s))
                out[side].setdefault(s, []).append(t)
    return out


def spread(ratios: list[float]) -> tuple[float, float, float, float]:
    """Quartiles and a 95 % confidence interval of the median (order statistics, n >= 6)."""
    xs = sorted(ratios)
    n = len(xs)
    q1, _, q3 = statistics.quantiles(xs, n=4)
    half = 1.96 * n**0.5 / 2
    lo, hi = max(0, int(n / 2 - half)), min(n - 1, int(n / 2 + half))
    return q1, q3, xs[lo], xs[hi]


def main() -> int:
    preload()
    try:
        outs = launch(side_by_side, RANKS, args=(SIZES, REPEAT, ROUNDS), device="cpu")
    except Exception as err:  # noqa: BLE001
        print(f"allreduce: could not measure: {err}")
        return 1
    worst = 0.0
    print(f"{RANKS} gloo ranks, {ROUNDS} rounds in one process group, order alternating")
    for s in SIZES:
        ours = [max(o["hpclab"][s][r] for o in outs) for r in range(ROUNDS)]
        theirs = [max(o["plain"][s][r] for o in outs) for r in range(ROUNDS)]
        t, plain_t = statistics.median(ours), statistics.median(theirs)
        # Each round's pair ran back to back: the median of paired ratios cancels slow drifts
        # and the rounds whose two halves landed in different modes.
        ratios = [p / o for p, o in zip(theirs, ours, strict=True)]  # time ratio = algbw ratio
        ratio = statistics.median(ratios)
        q1, q3, lo, hi = spread(ratios)
        worst = max(worst, abs(1 - ratio))
        print(
            f"{s / 2**20:>4.0f} MiB: hpclab {t * 1e3:7.2f} ms algbw {algbw_gbps(s, t):.2f} GB/s "
            f"busbw {busbw_gbps(s, t, RANKS):.2f} GB/s | plain {plain_t * 1e3:7.2f} ms | "
            f"algbw ratio median {ratio:.3f}, quartiles {q1:.3f}-{q3:.3f}, "
            f"95% CI of the median {lo:.3f}-{hi:.3f}, range {min(ratios):.3f}-{max(ratios):.3f}"
        )
    verdict = "PASS" if worst <= GOAL else "FAIL"
    print(f"allreduce: max_deviation_vs_plain={worst:.3f} goal<={GOAL:.2f} {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
