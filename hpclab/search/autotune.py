"""Experiment ``autotune``: generate a configuration space, prune it, benchmark what is left, keep
the best (chapter 08).

Fox et al. (2015, RaPyDLI) build their kernels this way: a parameter space is generated, *hard*
constraints remove what the hardware forbids, *soft* constraints remove what the user excludes,
the survivors are benchmarked in parallel, and the winner is often "a surprising set of
parameters". Here the tuned thing is the course's own training step (:func:`hpclab.train.
ddp_worker` around :func:`hpclab.train.train_step`, the ``cnn`` model on MNIST-like images) and
the knobs are the ones students turn by hand in earlier chapters: intra-op threads per rank
(chapter 01), ranks (chapter 06), the global batch size, DataLoader workers per rank (chapter
04), DDP's ``bucket_cap_mb`` (chapter 06), dtype (bf16 where the CPU has native bf16 dot
products) and memory format (channels-last convolutions).

- **Hard** constraints come from :func:`hpclab.measure.sysinfo.system_info` (what ``hpclab
  doctor`` reports): ranks x threads <= usable cores, and with the DataLoader workers too,
  ranks x (threads + workers) <= usable cores (each rank has its own DataLoader, so its workers
  are per rank, and a worker that decodes real data is as busy as a thread: giving each its own
  core is what lets candidates be screened side by side without sharing cores); the batch
  divisible by the ranks; the bucket size has no effect with one rank (one value is kept);
  bf16 only with native support (``avx512_bf16``, ``amx_bf16``; the runs are CPU ranks); the
  processes and a batch's activations within a quarter of available memory.
- **Soft** constraints come from the student: a largest batch (larger batches change what SGD
  learns, so a faster step is not a free win) and the dtypes they accept.
- The survivors are screened in parallel on disjoint cores, then the best few and the default
  are measured again alone, side by side (:mod:`hpclab.search.screen` says how and why).

The runs are CPU ranks (gloo) even on a GPU node: GPU knobs (GPUs per candidate, NCCL, pinned
memory, TF32) are not in this space yet.

Records: one per candidate (``status`` = ``pruned: <constraint>``, ``measured``, ``default``
or ``failed: <why>``: the screening), one ``final`` record per configuration re-measured alone, and one
``summary`` record with ``candidates``, ``pruned``, ``measured``, the default's and the best
one's samples/s, ``best_vs_default`` (from the final phase), and the screening wall time in
parallel (``screen_s``) beside the sum of the runs' own wall times (``screen_serial_s``: what one
after another would have taken).
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass
from typing import Any

from hpclab.config import Config, ConfigError, RunError, param
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.search.screen import KNOBS, cores_needed, screen, side_by_side

DTYPES = ("fp32", "bf16")
FORMATS = ("contiguous", "channels_last")
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
PROCESS_BYTES = 100 * 2**20  # rough private memory of one forked rank or loader worker
DDP_DEFAULT_MB = 25.0
# The training configuration every chapter uses unless told otherwise (threads: every usable core).
DEFAULT = {
    "ranks": 1,
    "batch": 128,
    "loader_workers": 0,
    "bucket_cap_mb": DDP_DEFAULT_MB,
    "dtype": "fp32",
    "memory_format": "contiguous",
}


@dataclass(frozen=True)
class AutotuneConfig(Config):
    side: int = param(28, min=8, max=128, quick=16, help="image side (1 x side x side inputs)")
    batches: tuple = param((32, 128, 512), min=1, max=65536, help="global batch sizes to try")
    threads: tuple = param(
        (), min=1, max=1024, help="threads per rank to try (auto = 1, 2, 4.. up to the node)"
    )
    ranks: tuple = param((), min=1, max=1024, help="ranks to try (auto = 1, 2, 4.. up to the node)")
    loader_workers: tuple = param((0, 1), min=0, max=64, help="DataLoader workers per rank to try")
    buckets_mb: tuple = param(
        (1.0, 25.0), min=0.0, max=1024.0, help="DDP bucket_cap_mb values to try (0: per tensor)"
    )
    dtypes: tuple = param(
        DTYPES, choices=DTYPES, quick=("fp32",), help="dtypes you accept (soft constraint)"
    )
    formats: tuple = param(
        FORMATS, choices=FORMATS, quick=("contiguous",), help="memory formats to try"
    )
    max_batch: int = param(4096, min=1, max=65536, help="largest batch you accept (soft)")
    repeat: int = param(5, min=3, max=50, quick=3, help="timed steps per run")
    at_once: int = param(
        0, min=0, max=1024, help="candidates screened at once (0: as many as fit; 1: one by one)"
    )
    finalists: int = param(
        3, min=1, max=20, quick=2, help="best screened candidates re-measured alone"
    )
    rounds: int = param(3, min=1, max=20, quick=2, help="alternating rounds of the final phase")

    def check(self) -> None:
        for name in ("batches", "loader_workers", "buckets_mb", "dtypes", "formats"):
            if not getattr(self, name):
                raise ConfigError(f"{name} is empty: give at least one value")


def _up_to(n: int) -> tuple[int, ...]:
    return tuple(sorted({1, *(2**k for k in range(1, 11) if 2**k < n), n}))


def _space(cfg: AutotuneConfig, node_cores: int) -> list[dict[str, Any]]:
    dims = (
        cfg.threads or _up_to(node_cores),
        cfg.ranks or _up_to(node_cores),
        cfg.batches,
        cfg.loader_workers,
        cfg.buckets_mb,
        DTYPES,
        cfg.formats,
    )
    return [dict(zip(KNOBS, values, strict=True)) for values in itertools.product(*dims)]


def memory_bytes(c: dict[str, Any], side: int) -> int:
    """A candidate's memory: per rank, its share of the batch's activations (cnn: 16 + 32
    channels at full resolution, fp32, kept for backward, x2 for gradients) and one process for
    the rank and each of its loader workers."""
    per_rank = c["batch"] // c["ranks"] * side * side * (16 + 32) * 4 * 2
    return c["ranks"] * (per_rank + (1 + c["loader_workers"]) * PROCESS_BYTES)


def prune(cfg: AutotuneConfig, info: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """Every candidate with ``""`` (kept) or the first constraint that removes it."""
    usable = info.get("cores_usable") or 1
    bf16 = any(f in (info.get("simd") or []) for f in BF16_FLAGS)
    mem = (info.get("mem_available_gb") or 1.0) * 2**30
    one_bucket = DDP_DEFAULT_MB if DDP_DEFAULT_MB in cfg.buckets_mb else cfg.buckets_mb[0]
    out = []
    for c in _space(cfg, info.get("cores_node") or usable):
        if c["ranks"] * c["threads"] > usable:
            why = f"hard: ranks x threads > {usable} usable cores"
        elif cores_needed(c) > usable:
            why = f"hard: ranks x (threads + loader workers) > {usable} usable cores"
        elif c["batch"] % c["ranks"]:
            why = "hard: batch not divisible by ranks"
        elif c["ranks"] == 1 and c["bucket_cap_mb"] != one_bucket:
            why = f"hard: bucket size unused with 1 rank (kept {one_bucket:g} MB)"
        elif c["dtype"] == "bf16" and not bf16:
            why = "hard: no native bf16 on this CPU"
        elif memory_bytes(c, cfg.side) > mem / 4:
            why = "hard: memory above a quarter of free memory"
        elif c["dtype"] not in cfg.dtypes:
            why = "soft: dtype excluded"
        elif c["batch"] > cfg.max_batch:
            why = f"soft: batch > {cfg.max_batch}"
        else:
            why = ""
        out.append((c, why))
    return out


def pruning_table(cfg: AutotuneConfig, info: dict[str, Any]) -> Any:
    """How many candidates each constraint removes on ``info``'s machine, and how many remain."""
    import pandas as pd

    counts: dict[str, int] = {}
    for _, why in prune(cfg, info):
        key = why or "kept: measured"
        counts[key] = counts.get(key, 0) + 1
    return pd.DataFrame({"candidates": counts}).rename_axis("constraint")


def _refuse_empty(judged: list[tuple[dict[str, Any], str]]) -> None:
    removed: dict[str, int] = {}
    for _, why in judged:
        removed[why] = removed.get(why, 0) + 1
    detail = "; ".join(f"{why}: {n}" for why, n in removed.items())
    raise ConfigError(f"nothing left to measure after pruning {len(judged)} candidates ({detail})")


def _usable_cpus(n: int) -> tuple[int, ...]:
    from hpclab.measure.sysinfo import usable_cpu_ids

    return tuple(usable_cpu_ids())[:n]


def run_autotune(cfg: AutotuneConfig, progress: Progress) -> Result:
    from hpclab.measure.sysinfo import system_info

    info = system_info()
    judged = prune(cfg, info)
    kept = [c for c, why in judged if not why]
    if not kept:
        _refuse_empty(judged)
    usable = info.get("cores_usable") or 1
    cpus = _usable_cpus(usable)
    default = dict(DEFAULT, threads=usable)
    runs, screen_s, most = screen([default, *kept], cpus, cfg.at_once, cfg.side, cfg.repeat,
                                  progress)  # fmt: skip
    records = [dict(c, status=f"pruned: {why}", tier="live") for c, why in judged if why]
    for k, (c, got) in enumerate(zip([default, *kept], runs, strict=True)):
        status = "default" if k == 0 else "measured"
        if "failed" in got:
            status = f"failed: {got.pop('failed')}"
            if k == 0:
                raise RunError(f"the default configuration {default} could not run ({status})")
        records.append(dict(c, **got, status=status, tier="live"))
    screened = [r for r in records if r["status"] == "measured"]
    ranked = sorted(screened, key=lambda r: -r["samples_per_s"])
    same = {k: default[k] for k in KNOBS}
    top = [r for r in ranked if {k: r[k] for k in KNOBS} != same][: cfg.finalists]
    finals = [default, *({k: r[k] for k in KNOBS} for r in top)]
    alone = side_by_side(finals, cpus, cfg.rounds, cfg.side, cfg.repeat, progress)
    for k, (c, got) in enumerate(zip(finals, alone, strict=True)):
        records.append(dict(c, **got, status="final", role="default" if k == 0 else "finalist",
                            tier="live"))  # fmt: skip
    records.append(summary_record(cfg, judged, records, most, screen_s))
    return make_result("autotune", cfg, records)


def summary_record(
    cfg: AutotuneConfig,
    judged: list[tuple[dict[str, Any], str]],
    records: list[dict[str, Any]],
    most: int,
    screen_s: float,
) -> dict[str, Any]:
    """The run in one record: candidates pruned, measured and failed, the best finalist against
    the default (both re-measured alone), how disturbed the rounds were, how long screening took."""
    kept = [c for c, why in judged if not why]
    screened = [r for r in records if r["status"] == "measured"]
    final = [r for r in records if r["status"] == "final"]
    base, best = final[0], max(final, key=lambda r: r["samples_per_s"])
    return {
        "status": "summary",
        "candidates": len(judged),
        "pruned": len(judged) - len(kept),
        "measured": len(kept),
        "failed": sum(1 for r in records if r["status"].startswith("failed")),
        "default_samples_per_s": base["samples_per_s"],
        "best_samples_per_s": best["samples_per_s"],
        "best": {k: best[k] for k in KNOBS},
        # Best of the finalists and the default, all re-measured alone: >= 1 by construction.
        "best_vs_default": best["samples_per_s"] / base["samples_per_s"],
        # The same pair compared by their fastest rounds: other processes only slow a run
        # down, so on a busy machine this is the less disturbed view (beside the median).
        "best_vs_default_fastest": best["samples_per_s_max"] / base["samples_per_s_max"],
        "spread_best": (best["samples_per_s_max"] - best["samples_per_s_min"])
        / best["samples_per_s"],
        "median_measured": statistics.median(r["samples_per_s"] for r in screened)
        if screened
        else None,
        "disturbed": sum(1 for r in records if r.get("disturbed")),
        "disturbed_final_rounds": sum(r["disturbed_rounds"] for r in final),
        "at_once_max": most,
        "screen_s": screen_s,
        "screen_serial_s": sum(r["wall_s"] for r in records if "wall_s" in r),
        "finalists": len(final) - 1,
        "rounds": cfg.rounds,
        "tier": "live",
    }
