"""The alpha-beta cost of each all-reduce algorithm, fitted and tested on held-out sizes (ch. 06).

An algorithm that takes ``steps`` sequential messages and pushes ``factor x m`` bytes through a
rank's link costs (Hockney's model, as Thakur, Rabenseifner & Gropp 2005 use it; the reduction's
own compute, their gamma term, is folded into beta here)::

    t(m, n) = steps(n) x alpha + factor(n) x m x beta          beta = 1 / bandwidth

    ring      steps 2(n-1)                factor 2(n-1)/n      (Patarasuk & Yuan 2009)
    tree      steps 2 ceil(log2 n)        factor 2 ceil(log2 n) (binomial reduce + broadcast)
    doubling  steps floor(log2 n) [+2]    factor as steps      (+2: fix-up when n is not 2**k)

So for small messages (alpha-bound) and many ranks the log2 n algorithms win; for big messages
(beta-bound) the ring wins, as its bytes factor stays below 2 while the others grow with log2 n.
NCCL's tree is a pipelined double binary tree (factor ~2, not 2 log2 n): see the chapter.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np

MODEL_SOURCE = "Thakur, Rabenseifner & Gropp 2005 (alpha-beta costs of MPICH's all-reduce)"
# ``builtin`` (dist.all_reduce) is priced as a ring, as the chapter's scaling model does.
ALGORITHM_NAMES = ("builtin", "ring", "tree", "doubling")


def terms(algorithm: str, n: int) -> tuple[float, float]:
    """(steps, bytes factor) of ``algorithm`` on ``n`` ranks."""
    if n < 2:
        return 0.0, 0.0
    if algorithm in ("ring", "builtin"):
        return 2.0 * (n - 1), 2.0 * (n - 1) / n
    if algorithm == "tree":
        k = 2.0 * math.ceil(math.log2(n))
        return k, k
    if algorithm == "doubling":
        k = float(n.bit_length() - 1) + (0 if n & (n - 1) == 0 else 2)
        return k, k
    raise ValueError(f"algorithm={algorithm!r} is not allowed; allowed: {ALGORITHM_NAMES}")


def model_s(algorithm: str, nbytes: float, n: int, alpha_s: float, bandwidth_bps: float) -> float:
    """Predicted seconds of one all-reduce of ``nbytes`` on ``n`` ranks."""
    steps, factor = terms(algorithm, n)
    return steps * alpha_s + factor * nbytes / bandwidth_bps


def fit(algorithm: str, n: int, nbytes: list[float], seconds: list[float]) -> tuple[float, float]:
    """Fit ``t = a + b m`` (weighted by 1/t: relative error over sizes spanning many orders of
    magnitude); return (alpha_s, bandwidth_bps) = (a / steps, factor / b)."""
    m, t = np.asarray(nbytes, dtype=float), np.asarray(seconds, dtype=float)
    if len(set(m.tolist())) < 2:
        raise ValueError("need at least two different message sizes to fit alpha and beta")
    w = 1.0 / t
    (a, b), *_ = np.linalg.lstsq(np.stack([np.ones_like(m), m], 1) * w[:, None], t * w, rcond=None)
    a, b = max(float(a), 0.0), float(b)
    if b <= 0:  # only latency-bound sizes (or noise): the biggest message bounds beta from below
        b = float(t[np.argmax(m)] / m.max())
    steps, factor = terms(algorithm, n)
    return a / steps, factor / b


def split_sizes(sizes: list[int]) -> tuple[list[int], list[int]]:
    """Fit on every other size (smallest and largest always in), hold out the rest."""
    s = sorted(set(sizes))
    train = set(s[::2]) | {s[-1]}
    return [x for x in s if x in train], [x for x in s if x not in train]


def fitted_seconds(record: dict[str, Any]) -> float:
    """The time the model is fitted to and tested on: the size's least disturbed sample
    (``seconds_best``) where the record has one, else its median ``seconds``. On a shared node
    other processes only ever add time, and they add it unevenly from one size to the next (a
    rank that waits in ``recv`` sleeps, and wakes a scheduler slice later when the cores are
    busy), so medians taken under load bend the line that alpha and beta describe."""
    return record.get("seconds_best", record["seconds"])


def add_model(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give each live record ``model_seconds`` from a fit on the training sizes of its algorithm
    and rank count (:func:`fitted_seconds`), with ``held_out`` and the fitted
    ``alpha_s``/``bandwidth_gbps``; return model-tier rows (one per size) to draw the fitted
    lines."""
    rows = []
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["algorithm"], r["ranks"]), []).append(r)
    for (algorithm, n), recs in groups.items():
        train, held = split_sizes([r["bytes"] for r in recs])
        if len(train) < 2:
            continue
        by = {r["bytes"]: r for r in recs}
        alpha, bw = fit(algorithm, n, train, [fitted_seconds(by[m]) for m in train])
        for r in recs:
            t = model_s(algorithm, r["bytes"], n, alpha, bw)
            r.update(model_seconds=t, held_out=r["bytes"] in held)
            r.update(alpha_s=alpha, bandwidth_gbps=bw / 1e9)
            rows.append(
                {
                    "tier": "model",
                    "impl": f"{algorithm} model",
                    "algorithm": algorithm,
                    "ranks": n,
                    "bytes": r["bytes"],
                    "time_s": t,
                    "seconds": t,
                    "busbw_gbps": r["bytes"] / t / 1e9 * 2 * (n - 1) / n,
                    "alpha_s": alpha,
                    "bandwidth_gbps": bw / 1e9,
                }
            )
    return rows


def held_out_errors(records: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Per algorithm: |model - measured| / measured on the held-out sizes (measured: the time
    the model was fitted to, :func:`fitted_seconds`)."""
    out: dict[str, list[float]] = {}
    for r in records:
        if r.get("tier") == "live" and r.get("held_out"):
            t = fitted_seconds(r)
            err = abs(r["model_seconds"] - t) / t
            out.setdefault(r["algorithm"], []).append(err)
    return out


def median_errors(records: list[dict[str, Any]]) -> dict[str, float]:
    return {k: statistics.median(v) for k, v in held_out_errors(records).items()}


def winners(
    alpha_s: float, bandwidth_bps: float, sizes: list[int], ranks: list[int]
) -> list[dict[str, Any]]:
    """The model's fastest hand-written algorithm per (ranks, size), with each one's time."""
    out = []
    for n in ranks:
        for m in sizes:
            t = {a: model_s(a, m, n, alpha_s, bandwidth_bps) for a in ("ring", "tree", "doubling")}
            out.append({"ranks": n, "bytes": m, "winner": min(t, key=t.get), **t})
    return out


def fit_table(result: Any) -> Any:
    """Per algorithm: the fitted alpha and bandwidth, and the held-out errors (median, max)."""
    import pandas as pd

    from hpclab.display import readable

    live = [r for r in result.records if r.get("tier") == "live" and "model_seconds" in r]
    errors = held_out_errors(live)
    rows = []
    for algorithm in dict.fromkeys(r["algorithm"] for r in live):
        r = next(x for x in live if x["algorithm"] == algorithm)
        e = errors.get(algorithm, [float("nan")])
        steps, factor = terms(algorithm, r["ranks"])
        rows.append(
            {
                "algorithm": algorithm,
                "ranks": r["ranks"],
                "steps": steps,
                "bytes_factor": factor,
                "alpha_us": r["alpha_s"] * 1e6,
                "bandwidth_gbps": r["bandwidth_gbps"],
                "heldout_median_err": statistics.median(e),
                "heldout_max_err": max(e),
            }
        )
    return readable(pd.DataFrame(rows))


def plot_winners(alpha_s: float, bandwidth_bps: float, max_ranks: int = 1024) -> Any:
    """The model's fastest algorithm for each message size and rank count (a map), for one
    link's alpha and bandwidth."""
    import plotly.graph_objects as go

    sizes = [4 * 4**k for k in range(15)]  # 4 B .. 1 GiB
    ranks = [2**k for k in range(1, int(math.log2(max_ranks)) + 1)]
    names = ["ring", "tree", "doubling"]
    table = winners(alpha_s, bandwidth_bps, sizes, ranks)
    z = [[names.index(r["winner"]) for r in table if r["ranks"] == n] for n in ranks]
    text = [[r["winner"] for r in table if r["ranks"] == n] for n in ranks]
    fig = go.Figure(
        go.Heatmap(
            x=[f"{m:.0e}" for m in sizes],
            y=[str(n) for n in ranks],
            z=z,
            text=text,
            texttemplate="%{text}",
            zmin=0,
            zmax=2,
            colorscale=[[0, "#4C78A8"], [0.5, "#F58518"], [1, "#54A24B"]],
            showscale=False,
            hovertemplate="%{y} ranks, %{x} bytes: %{text}<extra></extra>",
        )
    )
    fig.update_layout(
        title=(
            f"Fastest by the model (alpha {alpha_s * 1e6:.0f} us, {bandwidth_bps / 1e9:.2f} GB/s;"
            " Thakur et al. 2005)"
        ),
        xaxis_title="message bytes",
        yaxis_title="ranks",
        height=420,
    )
    return fig
