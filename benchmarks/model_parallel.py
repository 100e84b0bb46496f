"""Benchmark: hand-written data parallel vs DDP, and the pipeline bubble vs its model (ch. 06).

1. ``dp-by-hand`` on 2 CPU ranks (gloo), the ``large`` MLP, batch 64 per rank: the naive wrapper
   (one blocking all-reduce per tensor after backward), the bucketed one (async all-reduce per
   bucket from gradient hooks) and torch's DDP take turns within one launch, round by round.
   Goal: bucketed step time <= 1.15 x DDP's. What remains of the gap: the hooks and the copies
   into and out of the buckets run in Python, DDP's reducer in C++. The naive gap is reported.
2. ``pipeline`` on 2 stages (GPipe) with m = 2, 4, 8 and 16 micro-batches: the measured idle
   fraction per rank (mean over ranks) of the least disturbed (fastest) step, since load from
   other processes only ever adds idle time, beside two models: the one the chapter teaches,
   (p-1)/(m+p-1), and an extended one that adds what it leaves out
   (:func:`hpclab.parallel.pipeline.bubble_model_with_comm`): the slowest stage paces the
   pipeline (the last one also computes the loss), and a stage cannot compute while it receives
   a micro-batch's activations or gradients: every micro-batch pays its send/recv.
   The send/recv time is measured in the same step whose bubble is measured
   (:func:`hpclab.parallel.pipeline.handover_seconds`: from a pass ending on one rank to the
   pass it feeds starting on the next, for the hand-overs whose receiver was waiting; their
   mean, as the model pays one per hand-over and a slow one is paid in full). On a shared
   machine a hand-over costs a scheduler wake-up that comes and goes with the load, so a
   ping-pong timed a few seconds earlier (printed beside it, half the median round trip of the
   same tensor) can be off by several times; the step's own hand-overs cannot. Goals: the measured bubble within 25 % of the extended model at every m; and the
   trend over m: every two m whose extended-model bubbles differ by more than that 25 % are
   ordered the same way by the measurement. With cheap hand-overs the model falls with m (the
   chapter's lesson); with dear ones it rises again at large m (m hand-overs per step), and the
   measurement must follow either way. 1F1B at m = 8 and the simple model's ratio are reported.
   The load average is printed before and after. Still open: at load average 10-17 on 2 cores
   (2026-11-26, five runs) the bubble goal failed every time (worst measured/extended 1.4-1.7,
   at m = 8 or 16): with more runnable processes than cores a rank also waits for a core
   between its passes, which neither model nor the hand-overs count. No quiet run was possible.

Usage: python benchmarks/model_parallel.py   (no arguments, about 2 minutes on 2 cores)
"""

from __future__ import annotations

import statistics
import sys
import time

MS = (2, 4, 8, 16)
PIPE = dict(stages=2, batch_size=512, layers=16, width=512, steps=6, rounds=2)
GOAL_EXT = 0.25


def message_seconds(ctx, shapes: list[tuple[int, int]], repeat: int = 15) -> list[float]:
    """One-way send/recv time of a float32 tensor of each shape between ranks 0 and 1: half
    the median round trip of a ping-pong (gloo, as the pipeline's own hand-overs)."""
    import torch
    import torch.distributed as dist

    out = []
    for shape in shapes:
        buf = torch.ones(shape)
        rtts = []
        for k in range(repeat + 3):  # three warm-up trips
            t0 = time.perf_counter()
            if ctx.rank == 0:
                dist.send(buf, dst=1)
                dist.recv(buf, src=1)
            else:
                dist.recv(buf, src=0)
                dist.send(buf, dst=0)
            if k >= 3:
                rtts.append(time.perf_counter() - t0)
        out.append(statistics.median(rtts) / 2)
    return out


def pipeline_at(m: int, schedules: tuple[str, ...]):
    from hpclab import experiments

    return experiments.run("pipeline", micro_batches=m, schedules=schedules, **PIPE)


def busy_per_rank(result, schedule: str) -> list[float]:
    """Each rank's compute seconds in the fastest step (the timeline the record keeps)."""
    return [sum(e[3] - e[2] for e in events) for events in timeline(result, schedule)]


def timeline(result, schedule: str) -> list[list[tuple[str, int, float, float]]]:
    """The fastest step's passes per rank: (pass, micro-batch, start_s, end_s)."""
    ev = [r for r in result.records if r["kind"] == "event" and r["schedule"] == schedule]
    ranks = sorted({r["rank"] for r in ev})
    return [
        [(e["pass"], e["micro_batch"], e["start_s"], e["end_s"]) for e in ev if e["rank"] == r]
        for r in ranks
    ]


def step_starts(result, schedule: str) -> list[float]:
    rows = [r for r in result.records if r["kind"] == "rank" and r["schedule"] == schedule]
    return [r["step_start_s"] for r in sorted(rows, key=lambda r: r["rank"])]


def trend_breaks(measured: list[float], model: list[float], tol: float) -> list[tuple[int, int]]:
    """Pairs (i, j) the model orders clearly (bubbles more than ``tol`` apart, relatively) that
    the measurement orders the other way."""
    out = []
    for i in range(len(model)):
        for j in range(i + 1, len(model)):
            a, b = model[i], model[j]
            if abs(a - b) > tol * min(a, b) and (measured[j] - measured[i]) * (b - a) < 0:
                out.append((i, j))
    return out


def main() -> int:
    import os

    from hpclab import experiments
    from hpclab.dist import launch
    from hpclab.measure.sysinfo import usable_cores
    from hpclab.parallel.pipeline import bubble_model_with_comm, handover_seconds

    load = os.getloadavg()[0]
    print(f"load average {load:.1f} on {usable_cores()} usable core(s) before the runs")

    try:
        dp = experiments.run(
            "dp-by-hand", ranks=2, model="large", batch_size=64, steps=20, rounds=4
        )
        shapes = [(PIPE["batch_size"] // m, PIPE["width"]) for m in MS]
        msg = launch(message_seconds, 2, args=(shapes,), device="cpu", threads_per_rank=1)[0]
        pipes = {m: pipeline_at(m, ("gpipe", "1f1b") if m == 8 else ("gpipe",)) for m in MS}
    except Exception as err:  # noqa: BLE001 - report and exit 1: nothing measured
        print(f"model_parallel: could not measure: {err}")
        return 1
    rows = {r["impl"]: r for r in dp.records}
    for impl, r in rows.items():
        print(
            f"{impl:>9}: step {r['step_s'] * 1e3:7.2f} ms (compute {r['compute_s'] * 1e3:.2f} ms, "
            f"exposed comm {r['exposed_comm_s'] * 1e3:.2f} ms, blocked {r['blocked_s'] * 1e3:.2f} "
            f"ms), {r['allreduces_per_step']} all-reduces/step, {r['vs_ddp']:.3f} x DDP"
        )
    print(f"pipeline, 2 stages, GPipe, batch {PIPE['batch_size']}, width {PIPE['width']}:")
    measured, extended, deviations = [], [], []
    for (m, res), shape, c_pp in zip(pipes.items(), shapes, msg, strict=True):
        sched = {r["schedule"]: r for r in res.records if r["kind"] == "schedule"}
        g = sched["gpipe"]
        busy = busy_per_rank(res, "gpipe")
        hand = handover_seconds(timeline(res, "gpipe"), step_starts(res, "gpipe"))
        # the model pays c once per hand-over: their mean is what the step paid in all
        c = statistics.fmean(hand) if hand else c_pp
        ext = bubble_model_with_comm(m, busy, c)
        measured.append(g["bubble_fastest_step"])
        extended.append(ext)
        deviations.append(abs(g["bubble_fastest_step"] / ext - 1))
        print(
            f"  m={m:>2}: bubble {g['bubble_fastest_step']:.3f} (median step "
            f"{g['bubble_measured']:.3f}) | model (p-1)/(m+p-1) {g['bubble_model']:.3f} | "
            f"extended {ext:.3f} (stages {' / '.join(f'{b * 1e3:.1f}' for b in busy)} ms busy; "
            f"send/recv of {shape[0]}x{shape[1]} fp32 {c * 1e3:.2f} ms, mean of {len(hand)} "
            f"hand-overs in the step (median {statistics.median(hand or [c]) * 1e3:.2f}); "
            f"ping-pong {c_pp * 1e3:.2f} ms, extended with it "
            f"{bubble_model_with_comm(m, busy, c_pp):.3f}) | measured/extended "
            f"{g['bubble_fastest_step'] / ext:.3f}, measured/simple "
            f"{g['bubble_fastest_step'] / g['bubble_model']:.3f}"
        )
        if "1f1b" in sched:
            o = sched["1f1b"]
            print(
                f"  m={m:>2} 1F1B: bubble {o['bubble_fastest_step']:.3f}, activations peak "
                f"{o['activation_peak_bytes'] / 2**20:.1f} MiB ({o['max_in_flight']} "
                f"micro-batches) vs GPipe {g['activation_peak_bytes'] / 2**20:.1f} MiB "
                f"({g['max_in_flight']})"
            )
    breaks = trend_breaks(measured, extended, GOAL_EXT)
    print(
        "  trend: the extended model "
        + " -> ".join(f"{x:.3f}" for x in extended)
        + ", measured "
        + " -> ".join(f"{x:.3f}" for x in measured)
        + (
            "; ordered otherwise: " + ", ".join(f"m={MS[i]} vs m={MS[j]}" for i, j in breaks)
            if breaks
            else ""
        )
    )
    print(f"load average {os.getloadavg()[0]:.1f} after the runs")
    bucketed = rows["bucketed"]["vs_ddp"]
    worst = max(deviations)
    print(f"model_parallel: naive_vs_ddp={rows['naive']['vs_ddp']:.3f} (reported, no goal)")
    print(
        f"model_parallel: bucketed_vs_ddp={bucketed:.3f} goal<=1.15 "
        f"{'PASS' if bucketed <= 1.15 else 'FAIL'}"
    )
    print(
        f"model_parallel: bubble_trend_breaks={len(breaks)} goal<=0 "
        f"{'PASS' if not breaks else 'FAIL'}"
    )
    print(
        f"model_parallel: bubble_deviation_vs_extended_model={worst:.3f} goal<={GOAL_EXT} "
        f"{'PASS' if worst <= GOAL_EXT else 'FAIL'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
