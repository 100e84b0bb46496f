"""Chapter 05: the ``hogwild`` experiment (config, run, plot) on :mod:`hpclab.sgd.hogwild`.

A run trains serial SGD (one process) and then ``workers`` processes on one shared model with
the same total number of updates; records carry ``wall_s``, ``updates_per_s``, ``accuracy``,
``speedup_vs_serial`` and the smoothed loss curves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hpclab.config import Config, ConfigError, param
from hpclab.display import figure, readable
from hpclab.dist.placement import OVERSUBSCRIBE_LIMIT
from hpclab.measure.sysinfo import usable_cores
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.sgd.hogwild import DEFAULT_LR, merged_curve, overlap_model, train_hogwild
from hpclab.sgd.plots import add_loss_curves
from hpclab.sgd.problems import PROBLEMS, make_problem

# "Reached" losses for the time-to-target figure: about what serial SGD reaches in a third of
# the default run.
DEFAULT_TARGET = {"dense": 0.3, "large": 0.3, "sparse": 0.55}


@dataclass(frozen=True)
class HogwildConfig(Config):
    workers: int = param(2, min=1, max=64, help="worker processes sharing one model")
    threads: int = param(1, min=1, max=64, help="intra-op threads per worker")
    model: str = param("dense", choices=PROBLEMS, help="dense MLP, large MLP or sparse logreg")
    locking: str = param(
        "lockfree", choices=("lockfree", "locked"), help="Hogwild (no lock) or a lock per update"
    )
    updates: int = param(
        4000, min=10, max=1_000_000, quick=600, help="total SGD updates, split over the workers"
    )
    batch: int = param(32, min=1, max=1500, help="samples per update")
    lr: float = param(0.0, min=0.0, max=10.0, help="learning rate (0 = the model's default)")
    nnz: int = param(10, min=1, max=2000, help="features per sample (sparse model)")
    target_loss: float = param(0.0, min=0.0, max=10.0, help="loss to time (0 = model default)")
    serial: bool = param(True, help="also run serial SGD with the same updates, for the speedup")
    seed: int = param(0, min=0, max=2**31 - 1, help="seed of the data order and the weights")

    def check(self) -> None:
        busy = self.workers * self.threads
        cores = usable_cores()
        if busy > OVERSUBSCRIBE_LIMIT * cores:
            raise ConfigError(
                f"workers x threads = {self.workers} x {self.threads} = {busy} exceeds "
                f"{OVERSUBSCRIBE_LIMIT} x the {cores} usable cores of this allocation; "
                f"allowed: workers x threads <= {OVERSUBSCRIBE_LIMIT * cores}"
            )
        if self.updates < self.workers:
            raise ConfigError(f"updates={self.updates} must be >= workers={self.workers}")

    @property
    def learning_rate(self) -> float:
        return self.lr or DEFAULT_LR[self.model]

    @property
    def target(self) -> float:
        return self.target_loss or DEFAULT_TARGET[self.model]


def _time_to(curve: list[tuple[float, int, float]], target: float) -> float | None:
    for t, _, loss in curve:
        if loss <= target:
            return t
    return None


def _variants(config: HogwildConfig) -> list[tuple[str, int, bool]]:
    """(name, workers, locked) of each run: the serial baseline first when asked for."""
    variants = []
    if config.serial and config.workers > 1:
        variants.append(("serial", 1, False))
    locked = config.locking == "locked"
    variants.append(("locked" if locked else "hogwild", config.workers, locked))
    return variants


def _summary(
    config: HogwildConfig,
    problem: Any,
    model: Any,
    variant: str,
    workers: int,
    wall: float,
    curve: list[tuple[float, int, float]],
    features: int,
) -> dict[str, Any]:
    """One variant's record: its speed, where it ended, and when it reached the target."""
    return {
        "kind": "summary",
        "variant": variant,
        "model": config.model,
        "workers": workers,
        "threads": config.threads,
        "oversubscribed": workers * config.threads > usable_cores(),
        "updates": config.updates,
        "wall_s": wall,
        "updates_per_s": config.updates / wall,
        "loss": problem.loss(model),
        "accuracy": problem.accuracy(model),
        "target_loss": config.target,
        "time_to_target_s": _time_to(curve, config.target),
        "overlap_model": overlap_model(config.model, workers, config.batch, config.nnz, features),
    }


def run_hogwild(config: HogwildConfig, progress: Progress) -> Result:
    problem = make_problem(config.model, seed=config.seed, nnz=config.nnz)
    features = problem.make_model().weight.num_embeddings if config.model == "sparse" else 0
    variants = _variants(config)
    summaries: list[dict[str, Any]] = []
    curves: list[dict[str, Any]] = []
    for i, (variant, workers, locked) in enumerate(variants):
        sub = Progress(
            lambda d, t, n, i=i: progress.update(i + d / max(t, 1), len(variants), n),
            progress.cancel_event,
        )
        model, outs = train_hogwild(
            problem,
            workers,
            config.updates,
            config.batch,
            config.learning_rate,
            threads=config.threads,
            locked=locked,
            seed=config.seed,
            progress=sub,
        )
        wall = max(o["end"] for o in outs) - min(o["start"] for o in outs)
        curve = merged_curve(outs)
        summaries.append(_summary(config, problem, model, variant, workers, wall, curve, features))
        curves += [
            {"kind": "curve", "variant": variant, "time_s": t, "update": u, "loss_smoothed": v}
            for t, u, v in curve
        ]
    serial_wall = summaries[0]["wall_s"] if summaries[0]["variant"] == "serial" else None
    for s in summaries:
        s["speedup_vs_serial"] = serial_wall / s["wall_s"] if serial_wall else None
    progress.update(len(variants), len(variants), "")
    return make_result("hogwild", config, summaries + curves)


@figure
def plot_hogwild(result: Result):
    """Smoothed training loss against wall time and against updates, one line per run."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("loss vs wall time", "loss vs updates"))
    summaries = [r for r in result.records if r.get("kind") == "summary"]
    for k, s in enumerate(summaries):
        name = f"{s['variant']} {s['workers']}x{s['threads']} ({s['model']})"
        add_loss_curves(fig, _curves_of(result.records, k), name)
    fig.update_xaxes(title_text="seconds", row=1, col=1)
    fig.update_xaxes(title_text="updates (all workers)", row=1, col=2)
    fig.update_yaxes(title_text="smoothed minibatch loss", type="log", row=1, col=1)
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_layout(title="Hogwild!: the same updates, shared by processes", height=420)
    return fig


def _curves_of(records: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """The curve records that belong to the k-th summary (records come as runs of summaries
    followed by their curves, per result; concatenated results keep that order)."""
    runs: list[tuple[list[dict], list[dict]]] = []
    for r in records:
        if r.get("kind") == "summary":
            if not runs or runs[-1][1]:
                runs.append(([], []))
            runs[-1][0].append(r)
        elif r.get("kind") == "curve" and runs:
            runs[-1][1].append(r)
    seen = 0
    for summ, curv in runs:
        if k < seen + len(summ):
            variant = summ[k - seen]["variant"]
            return [c for c in curv if c["variant"] == variant]
        seen += len(summ)
    return []


def speedup_table(result: Result):
    """The summary records as a DataFrame (one row per run)."""
    import pandas as pd

    rows = [r for r in result.records if r.get("kind") == "summary"]
    return readable(pd.DataFrame(rows).drop(columns=["kind", "tier"], errors="ignore"))


def oversubscription_sweep(
    layouts: tuple[tuple[int, int], ...] = ((1, 1), (2, 1), (1, 2), (2, 2), (4, 1)),
    model: str = "dense",
    progress: Progress | None = None,
):
    """One Hogwild run per (workers, threads) layout, one summary row each: processes x threads
    beyond the usable cores (``oversubscribed``) cost time instead of buying it."""
    import pandas as pd

    from hpclab import experiments

    rows = []
    for workers, threads in layouts:
        r = experiments.run(
            "hogwild", progress, model=model, workers=workers, threads=threads, serial=False
        )
        rows.append(speedup_table(r).iloc[-1])
    cols = ["workers", "threads", "oversubscribed", "wall_s", "updates_per_s", "accuracy"]
    return readable(pd.DataFrame(rows)[cols].reset_index(drop=True))  # a row per layout
