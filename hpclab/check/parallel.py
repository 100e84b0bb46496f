"""Checks for chapter 06 part 2's exercises: gradient averaging, the bubble, a column-split layer."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from hpclab.check import CheckResult, as_number, exercise_check, failed, passed

STEPS, GLOBAL_BATCH, LR = 6, 12, 0.1  # 12 divides among 2 and 3 ranks


def _train(ctx: Any, average: Callable[..., Any] | None, lr: float) -> Any:
    """Train the tiny model STEPS steps on this rank's share of each global batch; with
    ``average=None`` and one process, the serial reference."""
    import torch

    from hpclab.ddp.serial_loop import exercise_data, exercise_model
    from hpclab.train import flat_params, train_step

    x_all, y_all = exercise_data().tensors
    model = exercise_model()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    rank, world = (ctx.rank, ctx.world_size) if ctx is not None else (0, 1)
    for k in range(STEPS):
        rows = slice(k * GLOBAL_BATCH + rank, (k + 1) * GLOBAL_BATCH, world)
        train_step(model, opt, x_all[rows], y_all[rows], after_backward=average)
    return flat_params(model)


def _dp_worker(ctx: Any, fn: Callable[..., Any]) -> Any:
    return _train(ctx, fn, LR)


def _ranks_failed(err: Any, n: int) -> CheckResult:
    if "NotImplementedError" in err.summary:
        return failed("replace the `raise NotImplementedError(...)` with your code")
    return failed(f"with {n} ranks, rank {err.rank} failed: {err.summary}")


@exercise_check
def naive_averaging(fn: Callable[..., Any], world_sizes: tuple[int, ...] = (2, 3)) -> CheckResult:
    """``fn(model)``, called after backward on every rank, must leave in every ``.grad`` the
    mean over ranks; then n ranks with 12/n samples each end where one process with 12 ends."""
    import torch

    from hpclab.dist import RankError, launch

    serial = _train(None, None, LR)
    for n in world_sizes:
        try:
            outs = launch(_dp_worker, n, args=(fn,), timeout_s=20, deadline_s=120)
        except RankError as err:
            return _ranks_failed(err, n)
        spread = max(float((o - outs[0]).abs().max()) for o in outs)
        if spread > 1e-6:
            return failed(
                f"with {n} ranks the replicas ended different (by up to {spread:.2e}): every rank "
                "must all-reduce every gradient, so all apply the same update"
            )
        if torch.allclose(outs[0], serial, rtol=1e-4, atol=1e-6):
            continue
        if torch.allclose(outs[0], _train(None, None, LR * n), rtol=1e-4, atol=1e-6):
            return failed(
                f"with {n} ranks you applied the *sum* of the gradients ({n} x the mean): "
                "divide by the world size after the all-reduce"
            )
        return failed(
            f"with {n} ranks the weights differ from one process by up to "
            f"{float((outs[0] - serial).abs().max()):.2e}: the all-reduce must sum every "
            "parameter's .grad, then divide it by the world size"
        )
    return passed(
        f"on {' and '.join(map(str, world_sizes))} ranks, averaging the gradients after backward "
        f"gives the weights of one process with the whole batch ({STEPS} steps)."
    )


BUBBLE_CASES = ((2, 1), (2, 8), (4, 4), (4, 16), (8, 32), (3, 7))


@exercise_check
def bubble(fn: Callable[[int, int], Any]) -> CheckResult:
    """``fn(p, m)`` = the idle fraction (p-1)/(m+p-1) of a p-stage pipeline, m micro-batches."""
    for p, m in BUBBLE_CASES:
        try:
            value = as_number(fn(p, m), f"bubble_fraction({p}, {m})")
        except NotImplementedError:
            return failed("replace the `raise NotImplementedError(...)` with your formula")
        except Exception as err:  # noqa: BLE001 - feedback, not a traceback
            return failed(f"bubble_fraction({p}, {m}) raised {type(err).__name__}: {err}")
        if isinstance(value, CheckResult):
            return value
        want = (p - 1) / (m + p - 1)
        if math.isclose(value, want, rel_tol=1e-9):
            continue
        where = f"bubble_fraction({p}, {m}) = {value:.4g}"
        if math.isclose(value, (p - 1) / m, rel_tol=1e-9):
            return failed(
                f"{where}: that is idle time relative to the busy time; the fraction is of the "
                "whole step, which lasts m + p - 1 slots"
            )
        if math.isclose(value, (p - 1) / p, rel_tol=1e-9) and m > 1:
            return failed(f"{where}: that is the naive schedule's (m = 1); use m")
        if math.isclose(value, 1 - want, rel_tol=1e-9):
            return failed(f"{where}: that is the busy fraction; the bubble is the idle one")
        return failed(f"{where}; count the slots a stage waits while the pipe fills and drains")
    return passed(f"your formula matches (p-1)/(m+p-1) for (p, m) in {list(BUBBLE_CASES)}.")


MICRO_CASES = (
    # (p-1)(1-target)/target not whole: rounding decides
    (4, 0.07), (2, 0.3), (8, 0.13), (3, 0.035), (4, 0.45),
    # whole, and exact in binary too: a bubble equal to the target is allowed (floor + 1 and
    # a strict < give one too many)
    (4, 0.25), (2, 0.5),
    # whole in decimal but not in binary: a float quotient lands a hair above and ceil rounds up
    (4, 0.2), (8, 0.7),
)  # fmt: skip


def _quotient(p: int, target: float) -> Fraction:
    """(p-1)(1-target)/target exactly, for the decimal ``target`` the caller wrote."""
    t = Fraction(str(target))
    return (p - 1) * (1 - t) / t


def least_micro_batches(p: int, target: float) -> int:
    """The least m >= 1 with (p-1)/(m+p-1) <= target, in exact arithmetic."""
    return max(1, math.ceil(_quotient(p, target)))


@exercise_check
def micro_batches(fn: Callable[[int, float], Any]) -> CheckResult:
    """``fn(p, target)`` = the smallest m whose bubble (p-1)/(m+p-1) is at most ``target``;
    tried where the quotient needs rounding up, where it is whole, and where it is whole in
    decimal but not in binary floating point."""
    for p, target in MICRO_CASES:
        try:
            m = fn(p, target)
        except NotImplementedError:
            return failed("replace the `raise NotImplementedError(...)` with your code")
        except Exception as err:  # noqa: BLE001 - feedback, not a traceback
            return failed(f"micro_batches_for({p}, {target}) raised {type(err).__name__}: {err}")
        want = least_micro_batches(p, target)
        number = as_number(m, f"micro_batches_for({p}, {target})")
        if isinstance(number, CheckResult) or not number.is_integer():
            return failed(f"micro_batches_for({p}, {target}) = {m!r}: m is a whole number")
        m = int(number)
        if m == want:
            continue
        where = f"micro_batches_for({p}, {target}) = {m}"
        q = _quotient(p, target)
        if m < want:
            got = (p - 1) / (m + p - 1) if m > 0 else float("inf")
            return failed(f"{where} leaves a bubble of {got:.3f} > {target}: round up, not down")
        if q.denominator == 1 and m == want + 1:
            if math.ceil((p - 1) * (1 - target) / target) == m:
                return failed(
                    f"{where}: (p-1)(1-target)/target is exactly {q} here, but in floating point "
                    f"{target} is not exact and the quotient lands a hair above {q}, so ceil "
                    "rounds it up. Count in exact arithmetic (fractions.Fraction, or integers)"
                )
            return failed(
                f"{where}: (p-1)(1-target)/target is exactly {q}, and m = {q} gives a bubble "
                f"equal to {target}, which is allowed (at most): floor + 1, or a strict <, "
                "gives one too many"
            )
        return failed(f"{where}: a smaller m already reaches a bubble <= {target}; take the least")
    return passed(
        "the least m with (p-1)/(m+p-1) <= target, i.e. m >= (p-1)(1-target)/target rounded up."
    )


def _column_traffic(probe: Any, w: Any, b: Any, slice_numel: int) -> tuple:
    """A right output reached by the wrong traffic: the weight gathered (every rank then holds
    the whole layer), or more than this rank's output slice sent."""
    import torch

    def is_param(t: Any) -> bool:
        return any(t.shape == p.shape and torch.equal(t, p) for p in (w, w.T, b))

    if any(is_param(t) for c in probe.calls for t in c.sent):
        return ("weights",)
    if probe.sent_numel() > slice_numel:
        return ("traffic", probe.sent_numel(), slice_numel, probe.collectives())
    return ("ok",)


def _column_worker(ctx: Any, fn: Callable[..., Any], shapes: tuple) -> list:
    import torch

    from hpclab.check.comm_probe import CommProbe

    rows = []
    for batch, d_in, d_out in shapes:
        torch.manual_seed(batch + d_out)
        full = torch.nn.Linear(d_in, d_out)
        x = torch.randn(batch, d_in)
        w = full.weight.detach().chunk(ctx.world_size, dim=0)[ctx.rank].clone()
        b = full.bias.detach().chunk(ctx.world_size)[ctx.rank].clone()
        with torch.no_grad(), CommProbe() as probe:
            y = fn(x, w, b)
            ref = full(x)
            no_bias = x @ full.weight.T
            flipped = torch.cat(
                [(x @ full.weight.T + full.bias).chunk(ctx.world_size, -1)[r]
                 for r in reversed(range(ctx.world_size))], -1,
            )  # fmt: skip
        if not isinstance(y, torch.Tensor):
            rows.append(("type", type(y).__name__))
        elif tuple(y.shape) != tuple(ref.shape):
            rows.append(("shape", tuple(y.shape), tuple(ref.shape)))
        elif torch.allclose(y, ref, atol=1e-5):
            rows.append(_column_traffic(probe, w, b, batch * (d_out // ctx.world_size)))
        elif torch.allclose(y, no_bias, atol=1e-5):
            rows.append(("bias",))
        elif torch.allclose(y, flipped, atol=1e-5):
            rows.append(("order",))
        else:
            rows.append(("values", float((y - ref).abs().max())))
    return rows


@exercise_check
def column_forward(fn: Callable[..., Any], world_sizes: tuple[int, ...] = (2, 4)) -> CheckResult:
    """``fn(x, weight_shard, bias_shard)`` on every rank must return the unsplit layer's output."""
    from hpclab.dist import RankError, launch

    shapes = ((8, 12, 16), (5, 7, 8))
    for n in world_sizes:
        try:
            outs = launch(_column_worker, n, args=(fn, shapes), timeout_s=20, deadline_s=120)
        except RankError as err:
            return _ranks_failed(err, n)
        for rank, rows in enumerate(outs):
            for (batch, d_in, d_out), row in zip(shapes, rows, strict=True):
                where = f"with {n} ranks, rank {rank}, x [{batch}, {d_in}] and {d_out} outputs"
                if row[0] == "ok":
                    continue
                if row[0] == "type":
                    return failed(f"{where}: return a tensor, got {row[1]}")
                if row[0] == "shape":
                    got, want = row[1], row[2]
                    if got == (batch, d_out // n):
                        hint = "that is this rank's slice only: all-gather the slices of all ranks"
                    elif got == (batch * n, d_out // n):
                        hint = "the slices are stacked as rows: concatenate along the last dim"
                    else:
                        hint = "the output has one row per sample and one column per feature"
                    return failed(f"{where}: shape {got}, expected {want}; {hint}")
                if row[0] == "weights":
                    return failed(
                        f"{where}: the output is right, but you gathered the layer's weights: "
                        "every rank then holds the whole layer, the memory the split is meant "
                        "to save. Keep the weights where they are; compute this rank's slice of "
                        "the output and all-gather the output slices"
                    )
                if row[0] == "traffic":
                    sent, slice_numel, names = row[1], row[2], row[3]
                    via = f" (through dist.{names[0]})" if names else ""
                    return failed(
                        f"{where}: the output is right, but this rank sent {sent} numbers{via}; "
                        f"its output slice is {slice_numel}. An all-gather of the slices sends "
                        "each rank's slice once (an all-reduce of a zero-padded output sends "
                        "the whole output)"
                    )
                if row[0] == "bias":
                    return failed(f"{where}: the output lacks the bias; add this rank's slice")
                if row[0] == "order":
                    return failed(f"{where}: the slices are in the wrong order: rank r's slice "
                                  "is columns r*out/p to (r+1)*out/p")  # fmt: skip
                return failed(
                    f"{where}: values differ from the unsplit layer by up to {row[1]:.3g}"
                )
    return passed(
        f"your column-split forward equals the unsplit layer on {' and '.join(map(str, world_sizes))}"
        " ranks, for two layer shapes."
    )
