"""Chapter 05: the ``paramserver`` experiment (config, run, plot) on :mod:`hpclab.sgd.paramserver`.

One run = ``trainers`` trainers and ``servers`` servers in one mode. Its records: a summary
(``updates_per_s``, ``gradients_per_s``, ``staleness_mean``, ``staleness_max``,
``server_busy_fraction``, final ``loss`` and ``accuracy``), the loss curve, and the staleness
histogram. :func:`sweep` runs several trainer counts and modes for the scaling figure.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from hpclab.config import Config, ConfigError, param
from hpclab.display import figure, plural, readable
from hpclab.dist.placement import OVERSUBSCRIBE_LIMIT
from hpclab.measure.sysinfo import usable_cores
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.sgd.hogwild import DEFAULT_LR
from hpclab.sgd.paramserver import MODES, Plan, initial_params, train_paramserver, trained_model
from hpclab.sgd.plots import add_loss_curves
from hpclab.sgd.problems import PROBLEMS, make_problem


@dataclass(frozen=True)
class ParamServerConfig(Config):
    trainers: int = param(2, min=1, max=32, help="trainer processes")
    servers: int = param(1, min=1, max=8, help="server processes (parameters sharded over them)")
    mode: str = param("async", choices=MODES, help="sync, async (Downpour), ssp, or allreduce")
    model: str = param("dense", choices=PROBLEMS, help="dense MLP, large MLP or sparse logreg")
    steps: int = param(300, min=1, max=100_000, quick=60, help="SGD steps per trainer")
    batch: int = param(32, min=1, max=1500, help="samples per trainer step")
    lr: float = param(0.0, min=0.0, max=10.0, help="learning rate (0 = the model's default)")
    bound: int = param(2, min=0, max=1000, help="ssp: max pushes ahead of the slowest trainer")
    nnz: int = param(10, min=1, max=2000, help="features per sample (sparse model)")
    fail_step: int = param(0, min=0, max=100_000, help="make trainer 0 fail at this step (0 = no)")
    seed: int = param(0, min=0, max=2**31 - 1, help="seed of the data order and the weights")

    def check(self) -> None:
        ranks = self.trainers + (0 if self.mode == "allreduce" else self.servers)
        cores = usable_cores()
        if ranks > OVERSUBSCRIBE_LIMIT * cores:
            raise ConfigError(
                f"trainers + servers = {ranks} processes exceed {OVERSUBSCRIBE_LIMIT} x the "
                f"{cores} usable cores of this allocation; allowed: at most "
                f"{OVERSUBSCRIBE_LIMIT * cores} processes"
            )
        if self.fail_step > self.steps:
            raise ConfigError(
                f"fail_step={self.fail_step} is beyond steps={self.steps}; allowed: 0..{self.steps}"
            )

    @property
    def learning_rate(self) -> float:
        return self.lr or DEFAULT_LR[self.model]


def run_paramserver(config: ParamServerConfig, progress: Progress) -> Result:
    problem = make_problem(config.model, seed=config.seed, nnz=config.nnz)
    servers = 0 if config.mode == "allreduce" else config.servers
    plan = Plan(
        problem,
        config.mode,
        max(servers, 1),
        config.trainers,
        config.steps,
        config.batch,
        config.learning_rate,
        config.seed,
        config.bound,
        initial_params(problem),
        fail_step=config.fail_step,
    )
    outs = train_paramserver(plan, progress)
    trainers = [o for o in outs if o["role"] == "trainer"]
    server_outs = [o for o in outs if o["role"] == "server"]
    wall = max(o["end"] for o in trainers) - min(o["start"] for o in trainers)
    gradients = config.steps * config.trainers
    # A model version is one update: one per gradient when async, one per round when sync.
    versions = config.steps if config.mode in ("sync", "allreduce") else gradients
    stale = [s for o in server_outs[:1] for s in o["staleness"]]  # server 0 sees every push
    model = trained_model(plan, outs)
    summary = {
        "kind": "summary",
        "mode": config.mode,
        "model": config.model,
        "trainers": config.trainers,
        "servers": servers,
        "steps": config.steps,
        "wall_s": wall,
        "updates": versions,
        "updates_per_s": versions / wall,
        "gradients_per_s": gradients / wall,
        "samples_per_s": gradients * config.batch / wall,
        "staleness_mean": sum(stale) / len(stale) if stale else 0.0,
        "staleness_max": max(stale) if stale else 0,
        "server_busy_fraction": max((o["busy_s"] / o["wall_s"] for o in server_outs), default=None),
        "loss": problem.loss(model),
        "accuracy": problem.accuracy(model),
    }
    curve = [
        {"kind": "curve", "time_s": t, "update": u, "loss_smoothed": v}
        for t, u, v in _merged_versions(trainers)
    ]
    hist = [
        {"kind": "staleness", "staleness": k, "count": c} for k, c in sorted(Counter(stale).items())
    ]
    return make_result("paramserver", config, [summary, *curve, *hist])


def _merged_versions(outs: list[dict[str, Any]]) -> list[tuple[float, int, float]]:
    """(time, newest model version any trainer has seen, mean of the trainers' latest smoothed
    losses), in time order; trainers log the server-0 version they last pulled."""
    t0 = min(o["start"] for o in outs)
    events = sorted(
        (o["start"] - t0 + t, w, version, loss)
        for w, o in enumerate(outs)
        for t, version, loss in o["curve"]
    )
    latest: dict[int, float] = {}
    newest, merged = 0, []
    for t, w, version, loss in events:
        latest[w] = loss
        newest = max(newest, version)
        merged.append((t, newest, sum(latest.values()) / len(latest)))
    return merged


def runs(result: Result) -> list[tuple[dict, list[dict], list[dict]]]:
    """Split (possibly concatenated) records into runs: (summary, curve, staleness)."""
    out: list[tuple[dict, list[dict], list[dict]]] = []
    for r in result.records:
        if r.get("kind") == "summary":
            out.append((r, [], []))
        elif out and r.get("kind") == "curve":
            out[-1][1].append(r)
        elif out and r.get("kind") == "staleness":
            out[-1][2].append(r)
    return out


def summary_table(result: Result):
    """One row per run."""
    import pandas as pd

    return readable(
        pd.DataFrame([s for s, _, _ in runs(result)]).drop(
            columns=["kind", "tier"], errors="ignore"
        )
    )


def _label(s: dict) -> str:
    servers = "" if s["mode"] == "allreduce" else ", " + plural(s["servers"], "server")
    return f"{s['mode']}: {plural(s['trainers'], 'trainer')}{servers}"


@figure
def plot_paramserver(result: Result):
    """Loss vs time, throughput vs trainers, staleness histogram, server busy fraction."""
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=2,
        cols=3,
        vertical_spacing=0.2,  # room for the top row's axis titles under its plots
        horizontal_spacing=0.08,
        subplot_titles=(
            "loss vs wall time",
            "loss vs model versions",
            "staleness of applied gradients",
            "gradients/s vs trainers",
            "server busy fraction vs trainers",
            "mean staleness vs trainers",
        ),
    )
    for s, curve, hist in runs(result):
        name = _label(s)
        add_loss_curves(fig, curve, name)
        total = sum(h["count"] for h in hist) or 1
        fig.add_bar(
            x=[h["staleness"] for h in hist],
            y=[h["count"] / total for h in hist],
            name=name,
            legendgroup=name,
            showlegend=False,
            row=1,
            col=3,
        )
    by_mode: dict[tuple[str, int], list[dict]] = {}
    for s, _, _ in runs(result):
        by_mode.setdefault((s["mode"], s["servers"]), []).append(s)
    for (mode, servers), rows in sorted(by_mode.items()):
        rows = sorted(rows, key=lambda r: r["trainers"])
        name = mode if mode == "allreduce" else f"{mode}, {plural(servers, 'server')}"
        panels = [(1, "gradients_per_s")]
        if mode != "allreduce":
            panels += [(2, "server_busy_fraction"), (3, "staleness_mean")]
        for col, key in panels:
            fig.add_scatter(
                x=[r["trainers"] for r in rows],
                y=[r[key] for r in rows],
                mode="lines+markers",
                name=f"{name} (by trainers)",
                legendgroup=f"scaling {name}",
                showlegend=col == 1,
                row=2,
                col=col,
            )
    fig.update_xaxes(title_text="seconds", row=1, col=1)
    fig.update_yaxes(title_text="smoothed loss", type="log", row=1, col=1)
    fig.update_xaxes(title_text="versions", row=1, col=2)
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_xaxes(title_text="versions behind", dtick=1, row=1, col=3)
    fig.update_yaxes(title_text="fraction of pushes", row=1, col=3)
    for col in (1, 2, 3):
        fig.update_xaxes(title_text="trainers", dtick=1, row=2, col=col)
    fig.update_yaxes(range=[0, 1.05], row=2, col=2)
    fig.update_layout(title="Parameter server vs all-reduce", height=720, barmode="group")
    return fig


def sweep(
    trainers: tuple[int, ...] = (1, 2, 3),
    modes: tuple[str, ...] = ("sync", "async", "allreduce"),
    progress: Progress | None = None,
    **params: Any,
) -> Result:
    """Run every (mode, trainers) pair and concatenate the results (for the scaling panels)."""
    progress = progress or Progress()
    combined: Result | None = None
    grid = [(m, n) for m in modes for n in trainers]
    for i, (mode, n) in enumerate(grid):
        progress.update(i, len(grid), f"{mode}, {n} trainer(s)")
        cfg = ParamServerConfig.create(mode=mode, trainers=n, **params)
        res = run_paramserver(cfg, Progress(cancel=progress.cancel_event))
        combined = res if combined is None else combined + res
    progress.update(len(grid), len(grid), "")
    assert combined is not None
    return combined
