"""Benchmark: the timing harness vs a plain hand-written best-of loop (chapter 00).

Both time the same fp32 2048^3 GEMM on the usable cores, interleaved round by round so that
background load hits both alike. The harness's figure is its *median* (what every record
reports); the plain loop's is its *best* sample, the most favourable number a hand-written loop
can claim. Each round gives a ratio; the median ratio is reported. The goal is that the harness, with its warm-up, synchronisation and correctness
check, reports within 5% of that.

Usage: python benchmarks/timing.py   (no arguments, < 1 minute on 2 cores)
"""

from __future__ import annotations

import sys

import torch
from gemm import plain_best_gflops  # benchmarks/gemm.py: the hand-written loop, shared

from hpclab.compute.gemm import time_gemm

SIZE = 2048
ROUNDS = 5
REPEAT = 5
GOAL = 0.95


def main() -> int:
    harness, plain = [], []
    for _ in range(ROUNDS):
        harness.append(time_gemm(SIZE, "fp32", "cpu", repeat=REPEAT).gflops)
        plain.append(plain_best_gflops(SIZE, REPEAT))
    if not harness or not plain or min(plain) <= 0:
        print("timing: could not measure")
        return 1
    # Per-round ratios, then their median: a lucky quiet moment in one round cannot decide.
    ratios = sorted(h / p for h, p in zip(harness, plain, strict=True))
    ratio = ratios[len(ratios) // 2]
    print(f"fp32 GEMM {SIZE}^3 on {torch.get_num_threads()} threads, {ROUNDS} interleaved rounds")
    print(f"harness median GFLOP/s per round: {', '.join(f'{x:.1f}' for x in harness)}")
    print(f"plain best-of GFLOP/s per round:  {', '.join(f'{x:.1f}' for x in plain)}")
    print(f"per-round ratios (sorted):        {', '.join(f'{x:.3f}' for x in ratios)}")
    verdict = "PASS" if ratio >= GOAL else "FAIL"
    print(f"timing: ratio_vs_plain={ratio:.3f} goal>={GOAL} {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
