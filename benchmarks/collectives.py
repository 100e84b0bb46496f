"""Benchmark: hand-written ring, tree and recursive-doubling all-reduce vs gloo's own (chapter 06).

One run of ``hpclab run allreduce --algorithm builtin,ring,tree,doubling`` (the experiment's own
code path) on 2 gloo ranks, 256 B to 16 MiB, the algorithms interleaved size by size in one
process group so that a slow spell of the machine hits them all alike. Two goals:

- the alpha-beta model of each algorithm (:mod:`hpclab.ddp.collective_model`), fitted on every
  other size, predicts the held-out sizes: median |model - measured| / measured <= 15%;
  "measured" is each size's least disturbed sample (``seconds_best``), over 25 rounds that
  each take one sample of every size and algorithm.

  Why (this goal failed at 0.45-0.76 under load, and the measurement was at fault, not the
  model): every size used to be timed in one stretch and its *median* fitted. On a busy 2-core
  node a rank that waits in ``recv`` sleeps and wakes a scheduler slice (milliseconds) late, so
  a stretch that met a busy spell came out 10-30x slower at 256 B-4 KiB (ring 4.7 ms per call
  against 0.3 ms a few seconds later), and 16 MiB, bound by a memory bus the other processes
  share, 2-8x; the fitted line then passed through none of the held-out sizes. The best of 25
  samples spread over the whole run falls on a line: the model holds. What it does miss is a
  knee near 256 KiB (the held-out error there was 27-54 % for tree and doubling in every run
  on 2026-11-26), likely where a message stops fitting a socket buffer and the 2 MiB L2 cache
  and goes in pieces, each a wake-up (a guess, not measured here). One straight line per
  algorithm cannot bend there; the goal is the median over the held-out sizes, and the 256 KiB
  error is printed with the others. Still open: tree's small-message time is bimodal under
  load (0.12-0.15 ms when both ranks happen to be on a core, 0.19-0.21 ms otherwise, the
  latter its median on a quiet machine); the best of 25 catches the rare fast mode at some
  sizes and not at others, and tree's held-out error went over 0.15 in 5 of 10 runs at load
  average 7-14 on 2 cores (0.05-0.29; ring 0.02-0.07 and doubling 0.03-0.11 in all 10).
- each hand-written algorithm within 1.5x of gloo's ``dist.all_reduce`` at 16 MiB: measured
  apart from the sweep, call by call in alternation (a barrier before each call, the slowest
  rank's time), and the median of the per-round ratios taken, as benchmarks/allreduce.py does:
  on a busy 2-core machine two sweeps a second apart can differ by 3x.

Usage: python benchmarks/collectives.py   (no arguments, ~1 minute on 2 cores; 2+ under load)
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from hpclab import experiments
from hpclab.ddp.collective_model import held_out_errors, median_errors
from hpclab.ddp.collectives import ALGORITHMS as HAND_WRITTEN
from hpclab.dist import RankContext, launch

BIG = 16 * 2**20
ALGORITHMS = ("builtin", "ring", "tree", "doubling")
ROUNDS = 15


def paired_rounds(ctx: RankContext, nbytes: int, rounds: int) -> dict[str, list[float]]:
    """Per round, each algorithm once in turn: this rank's seconds per call."""
    import torch.distributed as dist

    x = torch.zeros(nbytes // 4)
    fns = {"builtin": dist.all_reduce}
    fns.update(
        {a: (lambda t, f=f: f(t, ctx.rank, ctx.world_size)) for a, f in HAND_WRITTEN.items()}
    )
    out: dict[str, list[float]] = {a: [] for a in ALGORITHMS}
    for r in range(rounds + 1):  # round 0 warms up
        for a in ALGORITHMS:
            dist.barrier()
            t0 = time.perf_counter()
            fns[a](x)
            if r:
                out[a].append(time.perf_counter() - t0)
    return out


def main() -> int:
    try:
        res = experiments.run(
            "allreduce",
            ranks=2,
            min_bytes=256,
            max_bytes=BIG,
            repeat=25,
            device="cpu",
            algorithm=ALGORITHMS,
        )
        paired = launch(paired_rounds, 2, args=(BIG, ROUNDS), device="cpu")
    except Exception as err:  # noqa: BLE001
        print(f"collectives: could not measure: {err}")
        return 1
    live = [r for r in res.records if r["tier"] == "live"]
    print("2 gloo ranks; seconds per all-reduce (model fitted on the sizes marked *)")
    print(f"{'bytes':>10} " + " ".join(f"{a:>24}" for a in ALGORITHMS))
    for m in sorted({r["bytes"] for r in live}):
        row = {r["algorithm"]: r for r in live if r["bytes"] == m}
        cells = []
        for a in ALGORITHMS:
            r = row[a]
            mark = " " if r.get("held_out") else "*"
            cells.append(
                f"{r['seconds'] * 1e3:7.3f} {r['seconds_best'] * 1e3:7.3f}/"
                f"{r['model_seconds'] * 1e3:7.3f}{mark}"
            )
        print(f"{m:>10} " + " ".join(cells) + "   (ms: median, best/model)")
    errors, spread = median_errors(live), held_out_errors(live)
    slowest = {a: [max(o[a][i] for o in paired) for i in range(ROUNDS)] for a in ALGORITHMS}
    for a in ALGORITHMS[1:]:
        r = next(x for x in live if x["algorithm"] == a)
        print(
            f"{a}: alpha {r['alpha_s'] * 1e6:.1f} us, bandwidth {r['bandwidth_gbps']:.2f} GB/s, "
            f"held-out errors {', '.join(f'{e:.0%}' for e in spread[a])}"
        )
    for a in ALGORITHMS[1:]:
        e = errors[a]
        print(f"collectives: {a}_heldout_median_error={e:.3f} goal<=0.15 {_verdict(e <= 0.15)}")
    print(
        f"16 MiB, {ROUNDS} alternating rounds, median ms: "
        + ", ".join(f"{a} {statistics.median(slowest[a]) * 1e3:.1f}" for a in ALGORITHMS)
    )
    for a in ALGORITHMS[1:]:
        ratio = statistics.median(
            x / b for x, b in zip(slowest[a], slowest["builtin"], strict=True)
        )
        print(f"collectives: {a}_vs_gloo_16MiB={ratio:.2f} goal<=1.5 {_verdict(ratio <= 1.5)}")
    return 0


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


if __name__ == "__main__":
    sys.exit(main())
