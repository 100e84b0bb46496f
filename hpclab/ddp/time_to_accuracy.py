"""Time to accuracy in chapter 06: what a run to a target validation accuracy trains, and what
its records add (``hpclab run ddp --target-acc A``; ``hpclab run large-batch``).

The task is the engine's ``teacher`` data set (:mod:`hpclab.train.data`): 100 000 training
samples and 10 000 held out (quick mode: 20 000 and 4 000), enough for a global batch of 8192.
A record of a run to a target adds ``steps_to_target``, ``epochs_to_target``,
``time_to_target_s`` (training steps only) and ``core_hours`` (ranks x threads x time, what an
allocation is billed); a run that never reaches the target has ``reached`` false, ``None`` in
those fields, and a ``note`` that says so with the best accuracy it got.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hpclab.config import quick_mode
from hpclab.train import TrainSpec
from hpclab.train.optim import scaled_lr
from hpclab.train.target import steps_per_epoch

DATA = "teacher"


def task_size() -> tuple[int, int]:
    """(training samples, validation samples) of the teacher task a target run trains on."""
    return (20_000, 4_000) if quick_mode() else (100_000, 10_000)


def target_spec(
    spec: TrainSpec,
    ranks: int,
    target_acc: float,
    max_epochs: float,
    *,
    rule: str = "none",
    base_batch: int | None = None,
    warmup_epochs: float = 0.0,
    evals_per_epoch: int = 4,
) -> TrainSpec:
    """``spec`` made a run to ``target_acc`` on the teacher task: at most ``max_epochs`` epochs,
    validated ``evals_per_epoch`` times an epoch, its rate scaled by ``rule`` from
    ``base_batch`` (default: one rank's batch) to the global batch, with a linear warm-up over
    ``warmup_epochs`` epochs when > 0."""
    samples, val = task_size()
    sized = replace(spec, data=DATA, samples=samples, val_samples=val, warmup=0)
    per_epoch = steps_per_epoch(sized, ranks)
    if per_epoch < 1:
        raise ValueError(
            f"a global batch of {spec.per_rank_batch * ranks} is larger than the task's "
            f"{samples} training samples; allowed: global batch <= {samples}"
        )
    steps = max(1, round(max_epochs * per_epoch))
    warm = round(warmup_epochs * per_epoch)
    if warmup_epochs > max_epochs:
        raise ValueError(
            f"warm-up of {warmup_epochs:g} epochs is longer than the run ({max_epochs:g} "
            f"epochs); allowed: warm-up <= {max_epochs:g} epochs"
        )
    global_batch = spec.per_rank_batch * ranks
    return replace(
        sized,
        steps=steps,
        target_acc=target_acc,
        val_every=max(1, per_epoch // evals_per_epoch),
        lr=scaled_lr(rule, spec.lr, base_batch or spec.per_rank_batch, global_batch),
        schedule="warmup-constant" if warm else "constant",
        lr_warmup=warm,
    )


def target_fields(out: dict[str, Any], ranks: int, target_acc: float) -> dict[str, Any]:
    """What a record of a run to a target adds (from rank 0's result)."""
    t = out["time_to_target_s"]
    fields = {
        "target_acc": target_acc,
        "reached": out["reached"],
        "steps_to_target": out["steps_to_target"],
        "epochs_to_target": out["epochs_to_target"],
        "time_to_target_s": t,
        "core_hours": ranks * out["threads"] * t / 3600 if t is not None else None,
        "val_acc_last": out["val_acc_last"],
    }
    if not out["reached"]:
        best = max(c["val_acc"] for c in out["curve"])
        steps = out["curve"][-1]["step"]
        fields["note"] = (
            f"never reached {target_acc:g} in {steps} steps "
            f"({steps / out['steps_per_epoch']:.3g} epochs); best validation accuracy {best:.3f}"
        )
    return fields
