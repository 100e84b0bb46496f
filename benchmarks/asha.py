"""Chapter 08 benchmark: random search with and without early stopping (ASHA), side by side.

The same 27 sampled configurations per seed (random's), 3 seeds: ``random`` trains each to 9
epochs; ``asha`` (Optuna's SuccessiveHalvingPruner, rungs at 1, 3 and 9 epochs, eta 3) stops
the trials that are not in the best third at a rung. Per seed: the best validation loss found,
the total training epochs and the wall time; medians over seeds.

Goals (issue 28): ASHA's best validation loss within 5% of random's best, using at most 0.5 of
random's total training epochs (median over seeds). Li et al. (Hyperband, JMLR 2018; ASHA,
MLSys 2020) report early stopping reaching random search's loss several times sooner on their
benchmarks. The issue names ``benchmarks/time_to_accuracy.py`` for this goal; that file holds
chapter 06's large-batch goals, so chapter 08's goal lives here, beside ``search.py``.
300 training samples per trial keep the whole run within the benchmarks' 3 minutes on 2 cores.
"""

from __future__ import annotations

import statistics
import sys

from hpclab.progress import Progress
from hpclab.search.asha_compare import AshaConfig, per_search, run_asha

BEST_GOAL = 1.05  # ASHA's best loss / random's, at most
EPOCHS_GOAL = 0.5  # ASHA's total epochs / random's, at most


def main() -> int:
    cfg = AshaConfig.create(strategies=("random", "asha"), trials=27, seeds=3, epochs=9, eta=3,
                            samples=300)  # fmt: skip
    try:
        rows = per_search(run_asha(cfg, Progress()).records)
    except Exception as exc:  # noqa: BLE001
        print(f"asha: could not measure: {type(exc).__name__}: {exc}")
        return 1
    by = {(r["strategy"], r["seed"]): r for r in rows}
    for seed in range(cfg.seeds):
        a, r = by[("asha", seed)], by[("random", seed)]
        print(
            f"seed {seed}: random best {r['best_val_loss']:.4f} in {r['epochs']} epochs "
            f"{r['wall_s']:.1f} s; asha best {a['best_val_loss']:.4f} in {a['epochs']} epochs "
            f"{a['wall_s']:.1f} s ({a['stopped']} of {cfg.trials} stopped)"
        )

    def ratio(key: str) -> float:  # per seed (the same configurations), median over seeds
        return statistics.median(
            by[("asha", s)][key] / by[("random", s)][key] for s in range(cfg.seeds)
        )

    best, epochs, wall = ratio("best_val_loss"), ratio("epochs"), ratio("wall_s")
    print(f"asha: wall_vs_random={wall:.2f}")
    print(f"asha: best_loss_vs_random={best:.3f} goal<={BEST_GOAL} "
          f"{'PASS' if best <= BEST_GOAL else 'FAIL'}")  # fmt: skip
    print(f"asha: epochs_vs_random={epochs:.2f} goal<={EPOCHS_GOAL} "
          f"{'PASS' if epochs <= EPOCHS_GOAL else 'FAIL'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
