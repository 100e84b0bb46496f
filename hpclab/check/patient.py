"""Checks for chapter 03's fixes of the patient (:mod:`hpclab.profiling.patient`): the memory
leak of its monitoring loss, and its per-sample data path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hpclab.check import CheckResult, error_line, exercise_check, failed, passed

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
