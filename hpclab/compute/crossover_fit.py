"""The crossover model's fit (chapter 01): ``t(w) = latency + w / rate`` per device, and the
work where a GPU starts to beat the CPU. A fit says what the data could not determine (a rate,
when the time hardly grew with the work) instead of printing an unbounded number.
"""

from __future__ import annotations

import math
from typing import Any


def size_of(op: str, work: float) -> float:
    return (work / 2.0) ** (1 / 3) if op == "matmul" else work / 12.0


def crossover_work(
    lat_a: float, rate_a: float | None, lat_b: float, rate_b: float | None
) -> float | None:
    """Work where device b (larger latency, larger rate) starts to beat device a.

    ``inf`` when b is never faster, 0 when it is always faster, None when a rate is unknown
    (the fit found only a latency, :func:`fit_latency_rate`).
    """
    if rate_a is None or rate_b is None:
        return None
    if lat_b <= lat_a and rate_b >= rate_a:
        return 0.0
    slope = 1.0 / rate_a - 1.0 / rate_b
    if slope <= 0:
        return math.inf
    return max(0.0, (lat_b - lat_a) / slope)


# Below this share of the fitted time at the largest size, the fitted work term is noise: the
# data do not determine the rate (a GPU busy with launches only, at every size measured).
RATE_SHARE_MIN = 0.05


def fit_latency_rate(works: list[float], seconds: list[float]) -> tuple[float, float | None]:
    """Least-squares fit of ``t = latency + w / rate``; returns (latency s, rate per s).

    The fit is weighted by 1/t (relative error), since times span several decades. The rate
    is None when the data do not determine it: the fitted time does not grow with the work,
    or its work term is under ``RATE_SHARE_MIN`` of the fitted time at the largest size (never
    a rate of 1e30 from dividing by a fitted zero). A negative latency is reported as 0.
    """
    import numpy as np

    w, t = np.asarray(works, float), np.asarray(seconds, float)
    a = np.stack([np.ones_like(w), w], axis=1) / t[:, None]
    (lat, inv_rate), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    lat = max(float(lat), 0.0)
    work_term = float(w.max() * inv_rate)
    if inv_rate <= 0 or work_term < RATE_SHARE_MIN * (lat + work_term):
        return lat, None
    return lat, float(1.0 / inv_rate)


def fit_note(rate: float | None, works: list[float], op: str) -> str:
    """What a fit could not determine, in one sentence ("" when it determined both)."""
    if rate is not None:
        return ""
    return (
        f"rate not determined: the time per call hardly grew from {size_of(op, min(works)):.3g} "
        f"to {size_of(op, max(works)):.3g} (only the per-call latency shows); measure larger sizes"
    )


def fits_and_crossovers(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A latency/rate fit per (op, device), then the CPU-vs-each-GPU crossover per op."""
    fits: dict[tuple[str, str], dict[str, Any]] = {}
    for op in dict.fromkeys(p["op"] for p in points):
        for device in dict.fromkeys(p["device"] for p in points if p["op"] == op):
            rows = [p for p in points if p["op"] == op and p["device"] == device]
            works = [p["work"] for p in rows]
            lat, rate = fit_latency_rate(works, [p["seconds"] for p in rows])
            fits[(op, device)] = {
                "tier": rows[0].get("tier", "live"),
                "kind": "fit",
                "op": op,
                "device": device,
                "latency_s": lat,
                "rate_per_s": rate,
                "note": fit_note(rate, works, op),
            }
    out = list(fits.values())
    for (op, device), f in fits.items():
        cpu = fits.get((op, "cpu"))
        if device == "cpu" or cpu is None:
            continue
        w = crossover_work(cpu["latency_s"], cpu["rate_per_s"], f["latency_s"], f["rate_per_s"])
        measured = _measured_crossover(points, op, device)
        unknown = [d for d, fit in (("cpu", cpu), (device, f)) if fit["rate_per_s"] is None]
        out.append(
            {
                "tier": "model" if f["tier"] == "model" else "live",
                "kind": "crossover",
                "op": op,
                "device": device,
                "predicted_work": w,
                "predicted_size": None if w is None else size_of(op, w),
                "measured_size": measured,
                "note": (
                    f"not predicted: the fit of {' and '.join(unknown)} found no rate"
                    if unknown
                    else ""
                ),
            }
        )
    return out


def _measured_crossover(points: list[dict[str, Any]], op: str, device: str) -> int | None:
    """Smallest size from which ``device`` is faster than the CPU at every larger size."""
    cpu = {p["size"]: p["seconds"] for p in points if p["op"] == op and p["device"] == "cpu"}
    other = {p["size"]: p["seconds"] for p in points if p["op"] == op and p["device"] == device}
    sizes = sorted(set(cpu) & set(other))
    best = None
    for s in reversed(sizes):
        if other[s] < cpu[s]:
            best = s
        else:
            break
    return best


def crossover_tables(result: Any) -> tuple[Any, Any]:
    """Chapter 01's two tables of a crossover run: each device's fitted line t(w) = latency + w /
    rate (latency in µs, rate in G units of work per second), and per op and device the size where
    it overtakes the CPU, predicted by the lines and measured; both shown readably."""
    from hpclab.display import readable

    frame = result.frame()
    fits = frame.query("kind == 'fit'").assign(
        latency_us=lambda f: f["latency_s"] * 1e6, rate_g_per_s=lambda f: f["rate_per_s"] / 1e9
    )[["op", "device", "tier", "latency_us", "rate_g_per_s"]]
    sizes = frame.query("kind == 'crossover'")[["op", "device", "predicted_size", "measured_size"]]
    return readable(fits.set_index(["op", "device"])), readable(sizes.set_index(["op", "device"]))
