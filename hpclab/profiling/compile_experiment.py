"""Experiment ``compile`` (chapter 03): ``torch.compile`` on the course's model, against eager.

One training step (forward, loss, backward, SGD update: :func:`hpclab.train.train_step`) of an
``hpclab.train`` MLP, eager and compiled. Each mode's record gives:

- ``compile_s``: the first compiled step minus a steady one. TorchDynamo traces the forward,
  AOTAutograd derives the backward, and Inductor generates and compiles C++ (CPU) or Triton
  (GPU) kernels for both. A later run finds Inductor's cache on disk and compiles faster.
- ``step_s`` (median, with ``step_s_iqr``) and ``speedup`` = eager step / compiled step;
- ``graph_breaks``: where TorchDynamo had to stop a graph and fall back to Python
  (``torch._dynamo.explain``). ``graph_break=True`` plants one, a Python branch on a tensor's
  value, which is the classic cause.

Before timing, the compiled step is checked against eager: the same loss and the same weights
after one step from the same start. ``TORCHINDUCTOR_COMPILE_THREADS=1`` (set here, and Inductor's
``compile_threads`` patched to 1) compiles in this process. Without it Inductor starts a pool of
compile-worker processes that outlives the call. CPU compilation needs a C++ compiler; without one
the run says so in one line and times eager only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from hpclab.config import Config, param
from hpclab.display import figure
from hpclab.dist.placement import DEVICES
from hpclab.measure.timing import time_fn
from hpclab.progress import Progress
from hpclab.results import Result, load_reference, make_result
from hpclab.train import MLP_MODELS

MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs")
FEATURES = 784  # 28 x 28 MNIST-like images, flattened


@dataclass(frozen=True)
class CompileConfig(Config):
    model: str = param("large", choices=MLP_MODELS, quick="tiny", help="hpclab.train MLP")
    batch_size: int = param(256, min=1, max=65536, quick=64, help="samples per step")
    modes: tuple = param(("default",), choices=MODES, help="torch.compile modes beside eager")
    steps: int = param(20, min=2, max=10000, quick=6, help="timed steps per mode")
    graph_break: bool = param(False, help="plant a graph break: a Python branch on a tensor value")
    device: str = param("cpu", choices=DEVICES, help="cpu, cuda (GPU 0) or auto")
    references: bool = param(True, help="add this course's H200 run (bf16 transformer)")


class Branchy(nn.Module):
    """``body`` (an ``nn.Sequential``) with a Python ``if`` on a tensor's value before its last
    layer: TorchDynamo cannot trace a branch whose side depends on data, so it ends the graph
    there and starts a second one after it (a graph break)."""

    def __init__(self, body: nn.Sequential) -> None:
        super().__init__()
        self.body = body

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body[:-1](x)
        if h.mean() > 1e9:  # never true, but only known once the value exists
            h = h / 2
        return self.body[-1](h)


def compiler_missing(device: str) -> str | None:
    """One line when ``torch.compile`` cannot work here (CPU code needs a C++ compiler)."""
    if device != "cpu":
        return None
    cxx = os.environ.get("CXX") or "g++"
    if shutil.which(cxx) or shutil.which("c++"):
        return None
    return (
        f"no C++ compiler ({cxx} or c++ on PATH): torch.compile's CPU backend generates C++ and "
        "needs one (Debian: apt-get install g++); eager only"
    )


@contextlib.contextmanager
def one_compile_thread() -> Iterator[None]:
    """Inductor compiles in this process: no compile-worker pool is left behind."""
    import torch._inductor.config as inductor

    old = os.environ.get("TORCHINDUCTOR_COMPILE_THREADS")
    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    try:
        with inductor.patch(compile_threads=1):
            yield
    finally:
        if old is None:
            os.environ.pop("TORCHINDUCTOR_COMPILE_THREADS", None)
        else:
            os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = old


def build(model: str, graph_break: bool, device: str) -> nn.Module:
    from hpclab.train import make_model

    net = make_model(model, in_features=FEATURES, seed=0)
    return (Branchy(net) if graph_break else net).to(device)


def batch(batch_size: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    from hpclab.train import synthetic_images

    x, y = synthetic_images(batch_size, (1, 28, 28))
    return x.reshape(batch_size, -1).to(device), y.to(device)


def graph_breaks(model: nn.Module, x: torch.Tensor) -> dict[str, Any]:
    """TorchDynamo's view of the forward: graphs, breaks and why (``torch._dynamo.explain``)."""
    explained = torch._dynamo.explain(model)(x)
    return {
        "graphs": explained.graph_count,
        "graph_breaks": explained.graph_break_count,
        "break_reasons": "; ".join(str(r.reason).split("\n")[0] for r in explained.break_reasons)
        or "none",
    }


def measure(
    model: str, batch_size: int, mode: str, steps: int, device: str, graph_break: bool = False
) -> dict[str, Any]:
    """One mode's record (``mode="eager"``: no compilation). Shared with benchmarks/compile.py."""
    from hpclab.train import train_step

    x, y = batch(batch_size, device)
    net = build(model, graph_break, device)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    step = net if mode == "eager" else torch.compile(net, mode=mode)
    t0 = time.perf_counter()
    loss = train_step(step, opt, x, y)  # compiles forward and backward on the first call
    first_s = time.perf_counter() - t0
    # the same step, eager, from the same start: a compiled step must compute the same
    ref = build(model, graph_break, device)
    ref_loss = train_step(ref, torch.optim.SGD(ref.parameters(), lr=0.05), x, y)
    diff = max(
        (a - b).abs().max().item() for a, b in zip(net.parameters(), ref.parameters(), strict=True)
    )
    if abs(loss - ref_loss) > 1e-4 * max(1.0, abs(ref_loss)) or diff > 1e-4:
        raise RuntimeError(
            f"mode={mode}: the compiled step differs from eager (loss {loss:.6g} vs "
            f"{ref_loss:.6g}, weights by {diff:.3g}); not timing a wrong result"
        )
    timing = time_fn(lambda: train_step(step, opt, x, y), device=device, warmup=2, repeat=steps)
    import torch._inductor.config as inductor

    return {
        "mode": mode,
        "compile_threads": inductor.compile_threads,  # 1: compiled in this process
        "compile_s": 0.0 if mode == "eager" else max(0.0, first_s - timing.median_s),
        "step_s": timing.median_s,
        "step_s_iqr": timing.iqr_s,
        "step_s_q1": timing.quartiles_s[0],
        "step_s_q3": timing.quartiles_s[1],
        "samples_per_s": batch_size / timing.median_s,
    }


def run_compile(config: CompileConfig, progress: Progress) -> Result:
    from hpclab.compute.device import resolve_devices

    device = resolve_devices(config.device)[0]
    missing = compiler_missing(device)
    modes = ["eager", *([] if missing else config.modes)]
    records: list[dict[str, Any]] = []
    with one_compile_thread():
        x, _ = batch(config.batch_size, device)
        breaks = graph_breaks(build(config.model, config.graph_break, device), x)
        for i, mode in enumerate(modes):
            progress.update(i, len(modes), f"{mode}: compiling and timing {config.steps} steps")
            rec = measure(
                config.model, config.batch_size, mode, config.steps, device, config.graph_break
            )
            records.append(
                {"tier": "live", "device": device, "model": config.model, **rec, **breaks}
            )
        torch._dynamo.reset()  # drop the compiled code: a re-run compiles again (from the cache)
    eager = records[0]["step_s"]
    for r in records:
        r["speedup"] = eager / r["step_s"]
    if missing:
        records[0]["note"] = missing
    if config.references:
        records += load_reference("h200_compile").records
    progress.update(len(modes), len(modes), missing or "done")
    return make_result("compile", config, records)


@figure
def plot_compile(result: Result):
    """Left: step time per mode (live). Right: speed-up over eager, live and the H200 reference."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("step time (live)", "speed-up over eager"))
    live = [r for r in result.records if r.get("tier") == "live"]
    fig.add_bar(
        x=[r["mode"] for r in live],
        y=[1e3 * r["step_s"] for r in live],
        # from the median to the quartiles: a skewed spread never reaches below zero
        error_y={
            "type": "data",
            "array": [1e3 * (r["step_s_q3"] - r["step_s"]) for r in live],
            "arrayminus": [1e3 * (r["step_s"] - r["step_s_q1"]) for r in live],
        },
        text=[f"compile {r['compile_s']:.1f} s" if r["compile_s"] else "" for r in live],
        name="step (ms), bars to the quartiles",
        row=1,
        col=1,
    )
    for tier, label in (("live", "here"), ("reference", "H200, bf16 transformer")):
        rows = [r for r in result.records if r.get("tier") == tier]
        fig.add_bar(
            x=[r["mode"] for r in rows], y=[r["speedup"] for r in rows], name=label, row=1, col=2
        )
    fig.update_yaxes(title_text="ms per step", row=1, col=1)
    fig.update_yaxes(title_text="x eager", row=1, col=2)
    fig.update_layout(title="torch.compile vs eager", height=400)
    return fig
