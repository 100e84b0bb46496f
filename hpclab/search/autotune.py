"""Experiment ``autotune``: generate a configuration space, prune it, benchmark what is left, keep
the best (chapter 08).

Fox et al. (2015, RaPyDLI) build their kernels this way: a parameter space is generated, *hard*
constraints remove what the hardware forbids, *soft* constraints remove what the user excludes,
the survivors are benchmarked, and the winner is often "a surprising set of parameters". Here the
tuned thing is the course's own training step (:func:`hpclab.train.train_step`, the ``cnn`` model
on MNIST-like images) and the knobs are the ones students turn by hand in earlier chapters:
threads (chapter 01), batch size, dtype (bf16 where the CPU has native bf16 dot products),
memory format (channels-last for convolutions).

- **Hard** constraints come from :func:`hpclab.measure.sysinfo.system_info` (what ``hpclab
  doctor`` reports): threads <= usable cores; bf16 only with native support (``avx512_bf16``,
  ``amx_bf16``, or a GPU); a batch's activations must fit in a quarter of available memory.
- **Soft** constraints come from the student: a largest batch (larger batches change what SGD
  learns, so a faster step is not a free win) and the dtypes they accept.
- Every survivor is measured like chapter 01 measures (warm-up, repeats, median and spread, one
  after another: benchmarking two candidates at once on shared cores would measure the sharing).
  Samples/s is *per sample*, so batch sizes compare fairly.

Records: one per candidate (``status`` = ``measured`` or ``pruned: <constraint>``), and one
``summary`` record with ``candidates``, ``pruned``, ``measured``, the default configuration's and
the best one's samples/s and ``best_vs_default``.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass
from typing import Any

from hpclab.config import Config, ConfigError, param
from hpclab.progress import Progress
from hpclab.results import Result, make_result

DTYPES = ("fp32", "bf16")
FORMATS = ("contiguous", "channels_last")
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@dataclass(frozen=True)
class AutotuneConfig(Config):
    side: int = param(28, min=8, max=128, quick=16, help="image side (1 x side x side inputs)")
    batches: tuple = param((32, 128, 512), min=1, max=65536, help="batch sizes to try")
    threads: tuple = param(
        (), min=1, max=1024, help="thread counts to try ('' = 1, 2, 4.. up to the node)"
    )
    dtypes: tuple = param(DTYPES, choices=DTYPES, help="dtypes you accept (soft constraint)")
    formats: tuple = param(FORMATS, choices=FORMATS, help="memory formats to try")
    max_batch: int = param(4096, min=1, max=65536, help="largest batch you accept (soft)")
    repeat: int = param(5, min=3, max=50, quick=3, help="timed samples per candidate")

    def check(self) -> None:
        if not self.batches:
            raise ConfigError("batches is empty: give at least one batch size")


def _space(cfg: AutotuneConfig, node_cores: int) -> list[dict[str, Any]]:
    threads = cfg.threads or tuple(
        sorted({1, *(2**k for k in range(1, 11) if 2**k < node_cores), node_cores})
    )
    dims = (threads, cfg.batches, DTYPES, cfg.formats)
    return [
        dict(threads=t, batch=b, dtype=d, memory_format=f)
        for t, b, d, f in itertools.product(*dims)
    ]


def _activation_bytes(batch: int, side: int) -> int:
    # cnn: 16 + 32 channels at full resolution, fp32, kept for backward (x2 for gradients).
    return batch * side * side * (16 + 32) * 4 * 2


def prune(cfg: AutotuneConfig, info: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """Every candidate with ``""`` (kept) or the first constraint that removes it."""
    usable = info.get("cores_usable") or 1
    bf16 = bool(info.get("gpus")) or any(f in (info.get("simd") or []) for f in BF16_FLAGS)
    mem = (info.get("mem_available_gb") or 1.0) * 2**30
    out = []
    for c in _space(cfg, info.get("cores_node") or usable):
        if c["threads"] > usable:
            why = f"hard: threads > {usable} usable cores"
        elif c["dtype"] == "bf16" and not bf16:
            why = "hard: no native bf16 on this CPU"
        elif _activation_bytes(c["batch"], cfg.side) > mem / 4:
            why = "hard: activations above a quarter of free memory"
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


def measure(candidate: dict[str, Any], side: int, repeat: int) -> tuple[float, float, float]:
    """Samples/s of the training step with ``candidate``: median, min and max of ``repeat``."""
    import contextlib

    import torch

    from hpclab.compute.device import torch_threads
    from hpclab.measure.timing import time_fn
    from hpclab.train import make_model, synthetic_images, train_step

    with torch_threads(candidate["threads"]):
        x, y = synthetic_images(candidate["batch"], (1, side, side), seed=0)
        model = make_model("cnn", in_features=side * side, seed=0)
        x = x.reshape(len(x), -1)
        if candidate["memory_format"] == "channels_last":
            model = model.to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        bf16 = candidate["dtype"] == "bf16"

        def step() -> float:
            ctx = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
            with ctx:
                return train_step(model, opt, x, y)

        timing = time_fn(step, warmup=2, repeat=repeat, check=lambda loss: _finite(loss))
    n = candidate["batch"]
    return n / timing.median_s, n / timing.max_s, n / timing.min_s


def _finite(loss: float) -> None:
    if loss != loss or loss in (float("inf"), float("-inf")):
        raise ValueError(f"the training step returned loss={loss}: not a valid candidate")


DEFAULT = {"batch": 128, "dtype": "fp32", "memory_format": "contiguous"}  # threads: usable


def run_autotune(cfg: AutotuneConfig, progress: Progress) -> Result:
    from hpclab.measure.sysinfo import system_info

    info = system_info()
    judged = prune(cfg, info)
    kept = [c for c, why in judged if not why]
    if not kept:
        removed: dict[str, int] = {}
        for _, why in judged:
            removed[why] = removed.get(why, 0) + 1
        detail = "; ".join(f"{why}: {n}" for why, n in removed.items())
        raise ConfigError(
            f"nothing left to measure after pruning {len(judged)} candidates ({detail})"
        )
    default = dict(DEFAULT, threads=info.get("cores_usable") or 1)
    records = [dict(c, status=f"pruned: {why}", tier="live") for c, why in judged if why]
    for k, c in enumerate([default, *kept]):
        progress.update(k, len(kept) + 1, f"measuring {c}")
        med, lo, hi = measure(c, cfg.side, cfg.repeat)
        status = "default" if k == 0 else "measured"
        records.append(dict(c, status=status, samples_per_s=med, samples_per_s_min=lo,
                            samples_per_s_max=hi, tier="live"))  # fmt: skip
    progress.update(1, 1, "")
    measured = [r for r in records if r["status"] == "measured"]
    best = max(measured, key=lambda r: r["samples_per_s"])
    base = next(r for r in records if r["status"] == "default")
    records.append(
        {
            "status": "summary",
            "candidates": len(judged),
            "pruned": len(judged) - len(kept),
            "measured": len(kept),
            "default_samples_per_s": base["samples_per_s"],
            "best_samples_per_s": best["samples_per_s"],
            "best": {k: best[k] for k in ("threads", "batch", "dtype", "memory_format")},
            # The best of the measured candidates vs the default; >= 1 when the default is among
            # the candidates, which it is unless a constraint removed it.
            "best_vs_default": best["samples_per_s"] / base["samples_per_s"],
            "spread_best": (best["samples_per_s_max"] - best["samples_per_s_min"])
            / best["samples_per_s"],
            "median_measured": statistics.median(r["samples_per_s"] for r in measured),
            "tier": "live",
        }
    )
    return make_result("autotune", cfg, records)


def plot_autotune(result: Result) -> Any:
    """Every measured candidate's samples/s (error bars: min..max), the default and the best."""
    import plotly.graph_objects as go

    rows = sorted(
        (r for r in result.records if r["status"] in ("measured", "default")),
        key=lambda r: r["samples_per_s"],
    )
    labels = [
        f"{r['threads']} thr, batch {r['batch']}, {r['dtype']}, {r['memory_format'].replace('_', '-')}"
        + (" (default)" if r["status"] == "default" else "")
        for r in rows
    ]
    colours = ["#7f7f7f" if r["status"] == "default" else "#1f77b4" for r in rows]
    if rows:
        best = max(
            range(len(rows)),
            key=lambda i: rows[i]["samples_per_s"] if rows[i]["status"] == "measured" else -1,
        )
        colours[best] = "#2ca02c"
    fig = go.Figure(
        go.Bar(
            x=[r["samples_per_s"] for r in rows], y=labels, orientation="h", marker_color=colours,
            error_x={
                "type": "data", "symmetric": False,
                "array": [r["samples_per_s_max"] - r["samples_per_s"] for r in rows],
                "arrayminus": [r["samples_per_s"] - r["samples_per_s_min"] for r in rows],
            },
        )
    )  # fmt: skip
    summary = next((r for r in result.records if r["status"] == "summary"), None)
    title = "training samples/s per candidate (green: best, grey: default)"
    if summary:
        title += (
            f"<br><sup>{summary['candidates']} candidates, {summary['pruned']} pruned, "
            f"{summary['measured']} measured; best = {summary['best_vs_default']:.2f}x default</sup>"
        )
    fig.update_layout(title=title, height=max(300, 26 * len(rows) + 140), margin={"l": 260})
    fig.update_xaxes(title_text="samples/s")
    return fig
