"""Checks for chapter 03's exercises: read a profile, fix the leak, fix the data path, read an
operator table against the roofline."""

from __future__ import annotations

import cProfile
import pstats
from collections.abc import Callable
from typing import Any

from hpclab.check import CheckResult, as_number, error_line, exercise_check, failed, passed

# --- (a) the function with the most self time ------------------------------------------------


def _spin(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i
    return total


def _light(n: int) -> int:
    return sum(range(n))


def _heavy(n: int) -> int:
    """Its own loop, then a loop half as long in ``_spin``: the top self-time function is not a
    leaf, so its cumulative time (about 1.5x its self time) is not its self time."""
    total = 0
    for i in range(n):
        total += i * i
    return total + _spin(n // 2)


def _outer(heavy: int, light: int, reps: int) -> int:
    total = 0
    for _ in range(reps):
        total += _heavy(heavy) + _light(light)
    return total


def _case_profiles() -> list[tuple[str, pstats.Stats]]:
    """Profiles whose top self-time function differs (and differs from the top cumulative);
    in the first it calls another function, so its cumulative time is not its self time."""
    out = []
    for label, call in (
        ("a Python loop under two wrappers", lambda: _outer(200_000, 1000, 3)),
        ("a builtin sum that dominates", lambda: _outer(2_000, 2_000_000, 3)),
    ):
        prof = cProfile.Profile()
        prof.runcall(call)
        out.append((label, pstats.Stats(prof)))
    from hpclab.profiling.patient import train

    prof = cProfile.Profile()
    prof.runcall(lambda: train("slow-data", steps=8, samples=512))
    out.append(("the patient with slow-data", pstats.Stats(prof)))
    return out


def _truth(stats: pstats.Stats) -> tuple[str, float, str, float]:
    """(top self-time function, its self share, top cumulative function, its cumulative share)."""
    raw = stats.stats  # type: ignore[attr-defined]
    func = max(raw, key=lambda f: raw[f][2])
    by_cum = max((f for f in raw if raw[f][4]), key=lambda f: raw[f][3])
    total = stats.total_tt  # type: ignore[attr-defined]
    return func[2], raw[func][2] / total, by_cum[2], raw[func][3] / total


@exercise_check
def top_self(fn: Callable[[pstats.Stats], tuple[str, float]]) -> CheckResult:
    """``fn(stats) -> (function name, share of total time)`` for the top self-time function;
    checked on three profiles against pstats' own numbers."""
    for label, stats in _case_profiles():
        want_name, want_share, cum_name, cum_share = _truth(stats)
        try:
            got = fn(stats)
            name, share = got
        except Exception as err:  # noqa: BLE001 - feedback, not a traceback
            return failed(f"on {label}: your function raised {error_line(err)}")
        share = as_number(share, "the share")
        if isinstance(share, CheckResult):
            return share
        if str(name) != want_name and want_name not in str(name):
            if str(name) == cum_name or cum_name in str(name):
                return failed(
                    f"on {label}: {name!r} has the most *cumulative* time (it includes everything "
                    "it calls). Self time (pstats' tottime, index 2) counts only its own body."
                )
            return failed(f"on {label}: {name!r} is not the function with the most self time")
        if 1.5 < share <= 100 and abs(share / 100 - want_share) < 0.02:
            return failed(f"on {label}: give the share as a fraction of 1, not in percent")
        if abs(share - want_share) > 0.02 and abs(share - cum_share) <= 0.02:
            return failed(
                f"on {label}: share {share:.3f} is {name!r}'s *cumulative* time (pstats' "
                f"cumtime, index 3) over the total; its self time (tottime, index 2) gives "
                f"{want_share:.3f}. The two agree only for a function that calls nothing"
            )
        if abs(share - want_share) > 0.02:
            return failed(
                f"on {label}: share {share:.3f} is off; divide that function's self time by the "
                "profile's total time (stats.total_tt), not by its cumulative time"
            )
    return passed("you read the top self-time function and its share right on all three profiles.")


# --- (b) the memory leak --------------------------------------------------------------------


def _rss_growth(monitor_fn: Callable | None, steps: int) -> tuple[float, float]:
    from hpclab.profiling.memory_tool import ramp_mib_per_s, rss_timeline
    from hpclab.profiling.patient import train

    recs, run, error = rss_timeline(
        lambda: train("leak", steps=steps, monitor=512, monitor_fn=monitor_fn), interval_s=0.01
    )
    if error:
        raise RuntimeError(error)
    return ramp_mib_per_s(recs) * run.seconds, run.monitor_loss


def _reads_a_number(fn: Callable, *args: Any) -> bool:
    """Whether ``fn(*args)`` copies a tensor's value into Python (``.item()``, ``float()``,
    ``int()``): on a GPU each of these waits for the device. Seen as the aten op
    ``_local_scalar_dense`` that they dispatch to (on a CPU too, where nothing waits)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Watch(TorchDispatchMode):
        seen = False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            if "_local_scalar_dense" in str(func):
                Watch.seen = True
            return func(*args, **(kwargs or {}))

    try:
        with Watch():
            fn(*args)
    except Exception:  # noqa: BLE001 - the plain call above already ran without raising
        return False
    return Watch.seen


@exercise_check
def monitor_loss(fn: Callable) -> CheckResult:
    """``fn(model, loss_fn, x, y)`` returns the monitoring loss to add to a running total,
    without keeping the graph and without a device sync; same value as the leaking code."""
    import torch

    from hpclab.train import make_model

    model = make_model("tiny", in_features=16, classes=3, seed=1)
    x, y = torch.randn(32, 16), torch.randint(0, 3, (32,))
    loss_fn = torch.nn.functional.cross_entropy
    try:
        got = fn(model, loss_fn, x, y)
    except Exception as err:  # noqa: BLE001
        return failed(f"your function raised {error_line(err)}")
    if not isinstance(got, torch.Tensor):
        return failed(
            f"it returns a {type(got).__name__}: turning the loss into a Python number "
            "(.item(), float()) waits for the device every step (the item-sync fault). "
            "Return a tensor that carries no graph."
        )
    if _reads_a_number(fn, model, loss_fn, x, y):
        # torch.tensor(loss.item()) returns a tensor without a graph: the value alone passes
        return failed(
            "it returns a tensor, but made it from a Python number (.item(), float()): "
            "reading the number waits for the device every step (the item-sync "
            "fault) even though the result is a tensor again. Keep the loss a tensor throughout"
        )
    if got.grad_fn is not None or got.requires_grad:
        return failed(
            "the returned loss still has a grad_fn: adding it to a running total keeps this "
            "step's graph, and its saved activations, alive until the end of training"
        )
    with torch.no_grad():
        want = float(loss_fn(model(x), y))
    if abs(float(got) - want) > 1e-5 * max(1.0, abs(want)):
        return failed(f"the loss is {float(got):.6f}, expected {want:.6f} (mean over the batch)")
    try:
        leaky, leaky_loss = _rss_growth(None, 300)
        fixed, fixed_loss = _rss_growth(fn, 300)
    except Exception as err:  # noqa: BLE001
        return failed(f"training with your function raised {error_line(err)}")
    if abs(fixed_loss - leaky_loss) > 1e-4 * abs(leaky_loss):
        return failed(f"the monitoring loss changed: {fixed_loss:.6f} vs {leaky_loss:.6f}")
    if fixed > max(8.0, 0.3 * leaky):
        return failed(
            f"memory still grows by {fixed:.0f} MiB over 300 steps (the leak: {leaky:.0f} MiB)"
        )
    return passed("flat memory, same monitoring loss, no sync per step: leak fixed.")


# --- (c) the data path ----------------------------------------------------------------------


def _data_path_ratio(cls: type, batches_n: int = 30, rounds: int = 3) -> float:
    """Per-sample decoder time / ``cls``'s time for the patient's DataLoader, best of
    interleaved rounds (a busy neighbour only ever adds time)."""
    import time

    from hpclab.profiling.patient import batches, make_loader

    best = {"slow": float("inf"), "yours": float("inf")}
    for _ in range(rounds):
        for name, kw in (("slow", {"faults": ("slow-data",)}), ("yours", {"faults": ()})):
            dataset_cls = cls if name == "yours" else None
            _, loader = make_loader(kw["faults"], 4096, 64, 0, 0, dataset_cls)
            stream = batches(loader, batches_n)
            next(stream)
            t0 = time.perf_counter()
            for _ in stream:
                pass
            best[name] = min(best[name], time.perf_counter() - t0)
    return best["slow"] / best["yours"]


@exercise_check
def fast_dataset(cls: type, ratio_goal: float = 3.0) -> CheckResult:
    """``cls`` subclasses ``EncodedImages`` with a batched ``__getitems__``: same tensors,
    same final loss, and a data path >= ``ratio_goal`` x faster than the per-sample decoder."""
    import torch

    from hpclab.profiling.patient import EncodedImages, train

    if not (isinstance(cls, type) and issubclass(cls, EncodedImages)):
        return failed("pass your class (a subclass of EncodedImages), not an instance")
    if not callable(getattr(cls, "__getitems__", None)):
        return failed("define __getitems__(self, indices): the DataLoader then asks for a batch")
    ref = EncodedImages(256, seed=3)
    try:
        ds = cls(256, seed=3)
        idx = [5, 0, 77, 200, 31]
        x, y = ds.__getitems__(idx)
    except Exception as err:  # noqa: BLE001
        return failed(f"your dataset raised {error_line(err)}")
    want_x = torch.stack([ref[i][0] for i in idx])
    want_y = torch.tensor([ref.labels[i] for i in idx])
    if tuple(torch.as_tensor(x).shape) != tuple(want_x.shape):
        return failed(
            f"a batch of 5 has shape {tuple(torch.as_tensor(x).shape)}, expected (5, 784)"
        )
    if not torch.equal(torch.as_tensor(y), want_y):
        return failed("labels differ from the per-sample decoder's (same indices, same order?)")
    diff = float((torch.as_tensor(x, dtype=torch.float32) - want_x).abs().max())
    if diff > 1e-5:
        return failed(
            f"pixel values differ by up to {diff:.3g}: decode as (b / 255 - MEAN) / STD like "
            "__getitem__ does"
        )
    try:
        losses = {
            "slow": train("slow-data", steps=20).final_loss,
            "yours": train(steps=20, dataset_cls=cls).final_loss,
        }
        ratio = _data_path_ratio(cls)
    except Exception as err:  # noqa: BLE001
        return failed(f"training with your dataset raised {error_line(err)}")
    if abs(losses["yours"] - losses["slow"]) > 1e-3 * abs(losses["slow"]) + 1e-6:
        return failed(f"final loss {losses['yours']:.6f} differs from {losses['slow']:.6f}")
    if ratio < ratio_goal:
        return failed(
            f"the data path is only {ratio:.1f}x faster than the per-sample decoder (goal "
            f"{ratio_goal:.0f}x): is a Python loop over samples or pixels still inside?"
        )
    return passed(f"same batches and loss, and the data path is at least {ratio_goal:.0f}x faster.")


# --- (d) the operator table and the roofline ------------------------------------------------

BOUND_CASES = (
    (64, 784, 128, 12.0),  # the patient's first layer on a CPU like this one
    (1, 784, 128, 12.0),  # one sample: a matrix-vector product
    (2048, 2048, 2048, 12.0),
    (64, 784, 128, 25.0),  # the same layer on a machine with a higher ridge point (a GPU)
    (16, 512, 512, 7.0),
    (72, 72, 72, 12.0),  # exactly on the ridge (2 x 72^3 / (4 x 3 x 72^2) = 12): > vs >= differ
)


def _intensity(m: int, k: int, n: int) -> float:
    return 2 * m * k * n / (4 * (m * k + k * n + m * n))


# Operator tables in no particular order: a parent (aten::linear, aten::conv2d) with the most
# total time over the leaf that does the work, and a top operator other than aten::addmm.
OP_TABLES = (
    (
        ("aten::relu", 0.002, 0.002),
        ("aten::linear", 0.001, 0.08),
        ("aten::mm", 0.03, 0.03),
        ("aten::addmm", 0.05, 0.055),
        ("aten::copy_", 0.004, 0.004),
    ),
    (
        ("aten::max_pool2d", 0.01, 0.012),
        ("aten::conv2d", 0.0005, 0.09),
        ("aten::addmm", 0.008, 0.009),
        ("aten::mkldnn_convolution", 0.07, 0.075),
    ),
)


def _op_mistake(top_fn: Callable[[Any], str], table: Any) -> str | None:
    """None when ``top_fn(table)`` is the operator with the most self CPU time; else why not."""
    rows = list(table.to_dict("records") if hasattr(table, "to_dict") else table)
    want = max(rows, key=lambda r: r["self_cpu_seconds"])["operator"]
    by_total = max(rows, key=lambda r: r["cpu_total_seconds"])["operator"]
    try:
        got = top_fn(table.copy() if hasattr(table, "copy") else list(table))
    except Exception as err:  # noqa: BLE001
        return f"your operator function raised {error_line(err)}"
    if got == want:
        return None
    names = ", ".join(r["operator"] for r in rows)
    if got == by_total:
        return (
            f"in the table ({names}) {got!r} has the most *total* time (with the operators it "
            "calls); sort by self time"
        )
    if got == rows[0]["operator"]:
        return (
            f"{got!r} is the first row of a table ({names}) whose rows are not in order of self "
            "time: rank the rows by self_cpu_seconds"
        )
    return f"{got!r} is not the operator with the most self CPU time in the table ({names})"


@exercise_check
def matmul_bound(
    fn: Callable[[int, int, int, float], str], top_fn: Callable[[Any], str], table: Any
) -> CheckResult:
    """``fn(m, k, n, ridge)`` -> ``"compute"`` or ``"memory"`` for an fp32 ``[m,k] @ [k,n]``
    whose bytes are its three matrices; ``top_fn(table)`` -> the table's top operator by self
    time, tried on the student's table and on tables in another order."""
    import pandas as pd

    if not callable(top_fn):
        return failed(
            "pass your function itself, e.g. check.matmul_bound(my_bound, my_top_op, table)"
        )
    columns = ["operator", "self_cpu_seconds", "cpu_total_seconds"]
    for t in (table, *(pd.DataFrame(rows, columns=columns) for rows in OP_TABLES)):
        wrong = _op_mistake(top_fn, t)
        if wrong:
            return failed(wrong)
    for m, k, n, ridge in BOUND_CASES:
        want = "compute" if _intensity(m, k, n) >= ridge else "memory"
        try:
            got = fn(m, k, n, ridge)
        except Exception as err:  # noqa: BLE001
            return failed(f"your function raised {error_line(err)} for m,k,n={m},{k},{n}")
        if got not in ("compute", "memory"):
            return failed(f"answer 'compute' or 'memory', got {got!r}")
        if got != want and _intensity(m, k, n) == ridge:
            return failed(
                f"[{m},{k}] @ [{k},{n}] has an intensity of exactly {ridge:g} FLOP/byte, the "
                "ridge point itself: there both roofs meet and the kernel already reaches the "
                "compute peak, so it counts as compute-bound (use >=, not >)"
            )
        if got != want:
            return failed(
                f"[{m},{k}] @ [{k},{n}] with a ridge at {ridge} FLOP/byte: expected {want}. "
                "Intensity = FLOPs (2 per multiply-add) / bytes moved (4 per fp32 element of "
                "A, B and C); at or above the ridge point a kernel is compute-bound."
            )
    return passed(
        f"right operator (most self time) in your table and in {len(OP_TABLES)} others, and "
        f"{len(BOUND_CASES)} matmuls placed on the roofline right."
    )
