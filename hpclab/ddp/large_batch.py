"""Experiment ``large-batch``: steps to a target accuracy as the global batch grows (chapter 06).

More ranks mean a larger global batch, and a larger batch changes what SGD does per step. The
question is steps (and so time) to a target validation accuracy, not samples per second. Steps
to a target do not depend on how many ranks share a batch (parallel == serial, shown earlier in
the chapter), so the whole sweep trains in one process, one run per (global batch, LR rule,
warm-up or not), each through :func:`hpclab.train.run_spec` with
:func:`hpclab.train.target_worker` on the teacher task.

1. The base rate is tuned at the smallest batch first (the fewest steps to the target over
   :data:`LR_GRID`), so no rule wins by a poor baseline.
2. The sweep: every batch x rule (none, linear, square root) x warm-up (none, or
   ``warmup_epochs``). At the smallest batch every rule is the base rate.
3. The bend: the fewest steps at each batch, fitted with McCandlish et al. 2018's
   ``S = S_min (1 + B_crit / B)``: perfect scaling (steps halve as the batch doubles) below
   ``B_crit``, diminishing returns above; beside it the gradient noise scale ``B_simple``
   measured during the base run (:mod:`hpclab.train.noise`), which the paper finds near B_crit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hpclab.config import Config, ConfigError, RunError, param
from hpclab.ddp.time_to_accuracy import target_fields, target_spec, task_size
from hpclab.dist.placement import DEVICES, place
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.train import TrainSpec, run_spec, target_worker
from hpclab.train.optim import LR_RULES

# Base rates tried at the smallest batch, per optimizer (LARS's rate multiplies its trust
# coefficient 0.001 x ||w|| / ||g||, LAMB's is Adam-like).
LR_GRID = {
    "sgd": (0.05, 0.1, 0.2, 0.4, 0.8),
    "lars": (2.0, 5.0, 10.0, 20.0, 50.0),
    "lamb": (0.002, 0.005, 0.01, 0.02, 0.05),
}
QUICK_GRID = 2  # quick mode tunes over the second and third rates
NOISE_EVERY = 4  # the base run measures the noise scale at every 4th validation


@dataclass(frozen=True)
class LargeBatchConfig(Config):
    target_acc: float = param(0.66, min=0.01, max=1.0, quick=0.62, help="validation accuracy")
    min_batch: int = param(64, min=1, max=65536, log=True, help="smallest global batch")
    max_batch: int = param(4096, min=1, max=65536, log=True, quick=1024, help="largest")
    factor: int = param(4, min=2, max=16, help="each global batch is this times the last")
    rules: str = param("all", choices=("all", *LR_RULES), help="LR rule(s) as the batch grows")
    warmup_epochs: float = param(
        0.5, min=0.0, max=100.0, quick=0.0, help="warm-up of the warm-up runs (0: none)"
    )
    max_epochs: float = param(10.0, min=0.1, max=1000.0, quick=4.0, help="a run stops here")
    optimizer: str = param("sgd", choices=tuple(LR_GRID), help="sgd, or LARS / LAMB")
    lr: float = param(0.0, min=0.0, max=100.0, help="base rate at the smallest batch (0: tune)")
    device: str = param("auto", choices=DEVICES, help="where the one process trains")
    seed: int = param(0, min=0, max=2**31 - 1, help="data, shuffle and weight seed")

    def check(self) -> None:
        if self.min_batch > self.max_batch:
            raise ConfigError(
                f"min_batch={self.min_batch} > max_batch={self.max_batch}; allowed: "
                "min_batch <= max_batch"
            )
        if self.warmup_epochs > self.max_epochs:
            raise ConfigError(
                f"warmup_epochs={self.warmup_epochs:g} is longer than the run (max_epochs="
                f"{self.max_epochs:g}); allowed: warmup_epochs <= max_epochs"
            )
        samples = task_size()[0]
        if self.max_batch > samples // 2:
            raise ConfigError(
                f"max_batch={self.max_batch}: the task has {samples} training samples; "
                f"allowed: max_batch <= {samples // 2} (two steps an epoch)"
            )

    @property
    def batches(self) -> list[int]:
        out = [self.min_batch]
        while out[-1] * self.factor <= self.max_batch:
            out.append(out[-1] * self.factor)
        return out

    @property
    def rule_list(self) -> tuple[str, ...]:
        return LR_RULES if self.rules == "all" else (self.rules,)

    @property
    def lr_grid(self) -> tuple[float, ...]:
        from hpclab.config import quick_mode

        if self.lr:
            return (self.lr,)
        grid = LR_GRID[self.optimizer]
        return grid[1 : 1 + QUICK_GRID] if quick_mode() else grid


def _run(cfg: LargeBatchConfig, where: Any, batch: int, lr: float, rule: str, warm: float,
         progress: Progress, noise: int = 0) -> dict[str, Any]:  # fmt: skip
    """One run to the target at global ``batch`` (one process), as a record."""
    base = TrainSpec(model="tiny", per_rank_batch=batch, lr=lr, seed=cfg.seed,
                     optimizer=cfg.optimizer, measure_allreduce=False)  # fmt: skip
    spec = target_spec(base, 1, cfg.target_acc, cfg.max_epochs, rule=rule,
                       base_batch=cfg.min_batch, warmup_epochs=warm)  # fmt: skip
    # One thread: a small model's step is too short to share, and threads that spin waiting
    # for a busy core made steps 100x slower on a loaded 2-core machine.
    out = run_spec(spec, 1, worker=target_worker, args=(noise,), device=where.device,
                   threads=1, progress=progress)[0]  # fmt: skip
    return {
        "tier": "live",
        "global_batch": batch,
        "lr_rule": rule,
        "warmup_epochs": warm,
        "variant": f"{rule}, warm-up" if warm else rule,
        "base_lr": lr,
        "lr": spec.lr,
        "optimizer": cfg.optimizer,
        "steps_per_epoch": out["steps_per_epoch"],
        "step_s": out["step_s"],
        "device": out["device"],
        **target_fields(out, 1, cfg.target_acc),
        **({"b_simple": out["b_simple"]} if noise else {}),
    }


def run_large_batch(cfg: LargeBatchConfig, progress: Progress) -> Result:
    where = place(1, cfg.device)
    batches, rules = cfg.batches, cfg.rule_list
    warms = sorted({0.0, cfg.warmup_epochs})
    plan = len(cfg.lr_grid) + 1 + (len(batches) - 1) * len(rules) * len(warms) + len(warms) - 1
    done = [0]

    def part(label: str) -> Progress:
        i = done[0]
        done[0] += 1
        return Progress(
            lambda d, t, n: progress.update(i + (d / t if t else 0), plan, f"{label}: {n}"),
            cancel=progress.cancel_event,
        )

    records = []
    lo = batches[0]
    for lr in cfg.lr_grid:  # 1. tune the base rate at the smallest batch
        rec = _run(cfg, where, lo, lr, "none", 0.0, part(f"tuning lr={lr:g} at batch {lo}"))
        records.append(rec | {"role": "tune"})
    tuned = [r for r in records if r["reached"]]
    if not tuned:
        best = max(r["val_acc_last"] for r in records)
        raise RunError(
            f"no base rate in {', '.join(f'{lr:g}' for lr in cfg.lr_grid)} reached "
            f"target_acc={cfg.target_acc:g} at batch {lo} in {cfg.max_epochs:g} epochs (best "
            f"{best:.3f}); allowed: a lower target_acc or more max_epochs"
        )
    lr = min(tuned, key=lambda r: (r["steps_to_target"], r["base_lr"]))["base_lr"]
    base = _run(cfg, where, lo, lr, "none", 0.0, part(f"batch {lo}, lr={lr:g}"), NOISE_EVERY)
    for rule in rules:  # 2. at the smallest batch every rule is the base rate
        records.append(base | {"role": "sweep", "lr_rule": rule, "variant": rule})
    for warm in warms[1:]:
        rec = _run(cfg, where, lo, lr, "none", warm, part(f"batch {lo}, warm-up"))
        records += [
            rec | {"role": "sweep", "lr_rule": r, "variant": f"{r}, warm-up"} for r in rules
        ]
    for batch in batches[1:]:
        for rule in rules:
            for warm in warms:
                label = f"batch {batch}, {rule}{', warm-up' if warm else ''}"
                records.append(
                    _run(cfg, where, batch, lr, rule, warm, part(label)) | {"role": "sweep"}
                )
    records.append(bend(records, base.get("b_simple")))
    progress.update(plan, plan, "done")
    return make_result("large-batch", cfg, records + reference_records())


def fewest_steps(records: list[dict[str, Any]]) -> dict[int, int]:
    """The fewest steps to the target at each global batch, over every rule that reached it."""
    best: dict[int, int] = {}
    for r in records:
        if r.get("role") == "sweep" and r["reached"]:
            b = r["global_batch"]
            best[b] = min(best.get(b, r["steps_to_target"]), r["steps_to_target"])
    return dict(sorted(best.items()))


def fit_bend(best: dict[int, int]) -> tuple[float, float] | None:
    """``(S_min, B_crit)`` of ``S = S_min (1 + B_crit / B)``, least squares in ``1/B`` (a line:
    ``S = S_min + S_min B_crit / B``); ``None`` with fewer than 2 batches or no bend."""
    if len(best) < 2:
        return None
    xs = [1 / b for b in best]
    ys = list(best.values())
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    s_min = my - slope * mx
    if s_min <= 0 or slope <= 0:
        return None
    return s_min, slope / s_min


def bend(records: list[dict[str, Any]], b_simple: float | None) -> dict[str, Any]:
    fit = fit_bend(fewest_steps(records))
    return {
        "tier": "model",
        "role": "fit",
        "s_min": fit[0] if fit else None,
        "b_crit": fit[1] if fit else None,
        "b_simple": b_simple,
        "formula": "S = S_min (1 + B_crit / B), fitted to the fewest steps at each batch "
        "(McCandlish et al. 2018); B_simple = tr(Sigma) / |G|^2 measured in the base run",
    }


def reference_records() -> list[dict[str, Any]]:
    """The published results the sweep is read beside (reviews' reference figures 21-26)."""
    return [
        {"tier": "reference", "source": "Goyal et al. 2017", "global_batch": 8192,
         "finding": "ResNet-50 on ImageNet: batch 8192 with the linear rule and a 5-epoch "
         "warm-up (from the rate of batch 256) matches batch 256: top-1 error about 23.74 % "
         "vs 23.60 %, as commonly quoted"},
        {"tier": "reference", "source": "You, Gitman, Ginsburg 2017 (LARS)", "global_batch": 32768,
         "finding": "layer-wise rates: AlexNet to batch 8K and ResNet-50 to 32K without loss"},
        {"tier": "reference", "source": "You et al. 2020 (LAMB)", "global_batch": 32768,
         "finding": "BERT pre-training at batch 32K in 8599 iterations, 76 minutes"},
        {"tier": "reference", "source": "McCandlish et al. 2018", "global_batch": None,
         "finding": "the critical batch is near the gradient noise scale B_simple, which grows "
         "as the loss falls; useful batches from tens of thousands (ImageNet) to millions"},
    ]  # fmt: skip
