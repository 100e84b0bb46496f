"""Experiment ``allreduce``: all-reduce time, algbw and busbw, measured like nccl-tests (ch. 06).

For a message of ``m`` bytes taking ``t`` seconds on ``n`` ranks (nccl-tests, PERFORMANCE.md):

    algbw = m / t                      what the application sees
    busbw = algbw * 2(n-1)/n           what each link carried: a ring all-reduce moves
                                       2(n-1)/n of the message over every link, so busbw is
                                       comparable with the link's spec and across n

A latency/bandwidth (alpha-beta) fit of the ring model goes with the measurements
(:func:`hpclab.ddp.cost_model.fit_alpha_beta`). gloo on CPU, NCCL when every rank owns a GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from hpclab.config import Config, ConfigError, param
from hpclab.ddp.collective_model import ALGORITHM_NAMES, add_model
from hpclab.display import readable
from hpclab.dist import RankContext, place
from hpclab.dist.placement import DEVICES
from hpclab.measure.timing import Timing, time_fn
from hpclab.progress import Progress
from hpclab.results import Result, make_result


def algbw_gbps(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 bytes/s, as nccl-tests prints)."""
    return nbytes / seconds / 1e9


def busbw_gbps(nbytes: float, seconds: float, ranks: int) -> float:
    """Bus bandwidth in GB/s: algbw x 2(n-1)/n for all-reduce."""
    return algbw_gbps(nbytes, seconds) * 2 * (ranks - 1) / ranks


def message_sizes(min_bytes: int, max_bytes: int, factor: int = 4) -> tuple[int, ...]:
    """4, 16, 64, ... bytes (fp32 elements, so multiples of 4) up to ``max_bytes``."""
    out, m = [], max(4, min_bytes // 4 * 4)
    while m <= max_bytes:
        out.append(m)
        m *= factor
    return tuple(out)


def inner_calls(nbytes: int) -> int:
    """Calls per timed sample (the same on every rank): up to 50 back-to-back calls for messages
    below 16 MiB, one for bigger. Like nccl-tests, a sample is then the *mean* over a loop, so
    the occasional slow call (a rank descheduled on a busy node) counts, as it does in training;
    the median over samples still rejects a disturbed sample."""
    return max(1, min(50, 2**24 // max(nbytes, 1)))


@dataclass(frozen=True)
class AllreduceConfig(Config):
    ranks: int = param(2, min=2, max=64, help="ranks taking part")
    min_bytes: int = param(4, min=4, max=2**30, log=True, help="smallest message (bytes)")
    max_bytes: int = param(
        64 * 2**20, min=4, max=2**31, quick=16 * 2**20, log=True, help="largest message (bytes)"
    )
    repeat: int = param(10, min=3, max=1000, quick=5, help="timed samples per size")
    device: str = param(
        "auto", choices=DEVICES, help="auto: one GPU per rank (NCCL) if there are enough, else CPU"
    )
    algorithm: tuple = param(
        ("builtin",),
        choices=ALGORITHM_NAMES,
        help="builtin: dist.all_reduce; ring, tree, doubling: send/recv (hpclab.ddp.collectives)",
    )

    def check(self) -> None:
        if isinstance(self.algorithm, str):  # algorithm="tree" means ("tree",)
            object.__setattr__(self, "algorithm", (self.algorithm,))
        if self.min_bytes > self.max_bytes:
            raise ConfigError(
                f"min_bytes={self.min_bytes} exceeds max_bytes={self.max_bytes}; "
                "allowed: min_bytes <= max_bytes"
            )


def allreduce_worker(
    ctx: RankContext,
    sizes: tuple[int, ...],
    repeat: int,
    algorithms: tuple[str, ...] = ("builtin",),
    between: Callable[[int, str], None] | None = None,
) -> list[dict]:
    """Time ``dist.all_reduce`` (sum, fp32), or the send/recv ``algorithms`` of
    :mod:`hpclab.ddp.collectives`; check each sum once before timing.

    The ``repeat`` samples of every size and algorithm are taken in rounds, one sample of each
    per round (the order reversed every other round), so a slow spell of a shared machine
    lands on all sizes alike instead of bending the curve at the sizes it happened to hit.
    ``between(nbytes, algorithm)`` runs after every timed sample, outside the timed region
    (``benchmarks/allreduce.py`` times a plain loop there, sample by sample beside ours)."""
    cases = [(s, a) for s in sizes for a in algorithms]
    bufs = {s: torch.full((s // 4,), float(ctx.rank + 1), device=ctx.device) for s in sizes}
    want = ctx.world_size * (ctx.world_size + 1) / 2  # 1 + 2 + ... + n
    samples: dict[tuple[int, str], list[float]] = {c: [] for c in cases}
    clock = "perf_counter"
    for rnd in range(repeat):
        for nbytes, algorithm in cases if rnd % 2 == 0 else cases[::-1]:
            buf = bufs[nbytes]
            if rnd == 0:  # the first round checks the sum and warms up each case
                buf.fill_(float(ctx.rank + 1))

            def check(_: Any, buf: torch.Tensor = buf) -> None:
                if not torch.all(buf == want):
                    raise AssertionError(f"all_reduce gave {buf[:4].tolist()}, expected {want}")
                buf.zero_()  # zeros stay zeros: later calls cannot overflow

            fn = _allreduce_fn(algorithm, ctx)

            def call(buf: torch.Tensor = buf, fn: Any = fn) -> None:
                fn(buf)

            # No max_time_s cut-off: every rank must issue the same number of collectives.
            t = time_fn(
                call,
                device=ctx.device,
                warmup=5 if rnd == 0 else 1,  # nccl-tests' default, then one untimed call
                repeat=1,
                inner=inner_calls(nbytes),
                check=check if rnd == 0 else None,
                max_time_s=float("inf"),
                progress=None
                if between is None
                else (lambda *_, m=nbytes, a=algorithm: between(m, a)),
            )
            samples[(nbytes, algorithm)] += t.samples_s
            clock = t.clock
        ctx.progress(rnd + 1, repeat, f"round {rnd + 1} of {repeat}: every size and algorithm")
    out = []
    for nbytes, algorithm in cases:
        t = Timing(tuple(samples[(nbytes, algorithm)]), 5, clock, inner_calls(nbytes))
        out.append(
            {"bytes": nbytes, "algorithm": algorithm, "samples_s": t.samples_s, **t.summary()}
        )
    return out


def _allreduce_fn(algorithm: str, ctx: RankContext) -> Any:
    """``fn(buf)`` summing ``buf`` over the ranks with ``algorithm``."""
    import torch.distributed as dist

    if algorithm == "builtin":
        return dist.all_reduce
    from hpclab.ddp.collectives import ALGORITHMS

    impl = ALGORITHMS[algorithm]
    return lambda buf: impl(buf, ctx.rank, ctx.world_size)


def measure(
    ranks: int,
    sizes: tuple[int, ...],
    repeat: int,
    device: str,
    progress: Progress | None = None,
    algorithms: tuple[str, ...] = ("builtin",),
) -> list[dict[str, Any]]:
    """Live records: per size and algorithm the slowest rank's median time, algbw and busbw."""
    from hpclab.train import local  # launch on this node, warmed up (preload) first

    outs = local(
        allreduce_worker,
        ranks,
        args=(sizes, repeat, algorithms),
        device=device,
        progress=progress,
    )
    backend = place(ranks, device).backend
    records = []
    for j, row in enumerate(outs[0]):
        nbytes, algorithm = row["bytes"], row["algorithm"]
        t = max(o[j]["seconds"] for o in outs)  # a collective ends when its slowest rank does
        # The least disturbed sample: each sample's slowest rank (every rank timed the same
        # calls), then the fastest sample. Load from other processes only ever adds time, so
        # this is what the link and the algorithm cost; the alpha-beta fit reads it.
        best = min(map(max, zip(*(o[j]["samples_s"] for o in outs), strict=True)))
        records.append(
            {
                "tier": "live",
                "impl": "dist.all_reduce" if algorithm == "builtin" else f"{algorithm} (send/recv)",
                "algorithm": algorithm,
                "backend": backend,
                "ranks": ranks,
                "bytes": nbytes,
                "time_s": t,
                "seconds": t,
                "time_s_iqr": outs[0][j]["seconds_iqr"],
                "seconds_best": best,
                "algbw_gbps": algbw_gbps(nbytes, t),
                "busbw_gbps": busbw_gbps(nbytes, t, ranks),
            }
        )
    return records


def fit_records(records: list[dict[str, Any]], ranks: int, label: str) -> list[dict[str, Any]]:
    """The alpha-beta fit of ``records`` as model-tier rows (one per size, same fields)."""
    from hpclab.ddp.cost_model import fit_alpha_beta, ring_allreduce_s

    alpha, bw = fit_alpha_beta([r["bytes"] for r in records], [r["time_s"] for r in records], ranks)
    rows = []
    for r in records:
        t = ring_allreduce_s(r["bytes"], ranks, alpha, bw)
        rows.append(
            {
                "tier": "model",
                "impl": f"alpha-beta fit ({label})",
                "ranks": ranks,
                "bytes": r["bytes"],
                "time_s": t,
                "algbw_gbps": algbw_gbps(r["bytes"], t),
                "busbw_gbps": busbw_gbps(r["bytes"], t, ranks),
                "alpha_s": alpha,
                "bandwidth_gbps": bw / 1e9,
            }
        )
    return rows


def run_allreduce(config: AllreduceConfig, progress: Progress) -> Result:
    where = place(config.ranks, config.device)
    progress.update(0, 1, where.note)
    device = where.device
    sizes = message_sizes(config.min_bytes, config.max_bytes)
    live = measure(config.ranks, sizes, config.repeat, device, progress, config.algorithm)
    records = list(live)
    builtin = [r for r in live if r["algorithm"] == "builtin"]
    if len(sizes) >= 2 and builtin:  # first: the fit chapter 06's scaling model reads
        records += fit_records(builtin, config.ranks, builtin[0]["backend"])
    # Every live record gets model_seconds from its algorithm's fit on the other sizes.
    records += [r for r in add_model(live) if r["algorithm"] != "builtin"]
    return make_result("allreduce", config, records)


def table_at(result: Result, sizes_mb: tuple[float, ...] = (1, 16, 64)) -> Any:
    """Live rows of ``result`` at the given sizes (MiB) as a small DataFrame."""
    import pandas as pd

    want = {int(mb * 2**20) for mb in sizes_mb}
    rows = [
        {
            "MiB": r["bytes"] / 2**20,
            "ranks": r["ranks"],
            "backend": r["backend"],
            "time_ms": r["time_s"] * 1e3,
            "algbw_gbps": r["algbw_gbps"],
            "busbw_gbps": r["busbw_gbps"],
        }
        for r in result.records
        if r["tier"] == "live" and r["bytes"] in want
    ]
    return readable(pd.DataFrame(rows))
