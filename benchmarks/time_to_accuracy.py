"""Chapter 06 (and 08) benchmark: time to accuracy, not samples per second.

Large batches (chapter 06, issue 28): one ``large-batch`` sweep on the full teacher task
(100 000 samples): the base rate tuned at a global batch of 32, then batches 32, 64 and 128
with each LR rule, with and without a half-epoch warm-up. Goal: with warm-up, the linear rule
(Goyal et al. 2017) reaches the target in fewer steps than no scaling at the largest batch
tried (a run that never reaches it counts as infinitely many steps). Printed beside it: the
base rate, the steps of every variant, the fitted critical batch and the measured noise scale.

The largest batch stays below this task's critical batch (B_simple measured ~360, the fitted
bend ~560 in a sweep to 512): past it, at 512, the linear rule's rate (16x the base) diverged
with or without warm-up and only the square-root rule reached the target, as McCandlish et
al. 2018's model says a batch past the bend buys little and a rate past stability buys
nothing.

Each goal is a function returning its result line(s), so more goals sit beside it.
"""

from __future__ import annotations

import math
import sys

from _goals import report

from hpclab.experiments import run

LARGE_BATCH = {
    "min_batch": 32,
    "max_batch": 128,
    "factor": 2,
    "rules": "all",
    "warmup_epochs": 0.5,
    "max_epochs": 8.0,
    "target_acc": 0.66,
    "device": "cpu",
}


def _steps(r: dict) -> float:
    return r["steps_to_target"] if r["reached"] else math.inf


def large_batch_goal() -> list[str]:
    """Linear + warm-up vs no scaling at the largest batch of one sweep."""
    res = run("large-batch", **LARGE_BATCH)
    sweep = [r for r in res.records if r.get("role") == "sweep"]
    top = max(r["global_batch"] for r in sweep)
    print(f"base rate tuned at batch {LARGE_BATCH['min_batch']}: {sweep[0]['base_lr']}")
    for batch in sorted({r["global_batch"] for r in sweep}):
        row = {r["variant"]: r["steps_to_target"] for r in sweep if r["global_batch"] == batch}
        print(f"batch {batch}: steps to {LARGE_BATCH['target_acc']} " + ", ".join(
            f"{k} {v if v is not None else 'never'}" for k, v in row.items()))  # fmt: skip
    fit = next(r for r in res.records if r.get("role") == "fit")
    print(f"bend: B_crit={fit['b_crit']}, noise scale B_simple={fit['b_simple']}")
    by = {r["variant"]: r for r in sweep if r["global_batch"] == top}
    linear, none = _steps(by["linear, warm-up"]), _steps(by["none"])
    ratio = none / linear if linear < math.inf else 0.0
    verdict = "PASS" if linear < none else "FAIL"
    return [
        f"time_to_accuracy: none_over_linear_warmup_steps_at_batch_{top}={ratio:.2f} "
        f"goal>1.0 {verdict}"
    ]


def main() -> int:
    return report("time_to_accuracy", [large_batch_goal])


if __name__ == "__main__":
    sys.exit(main())
