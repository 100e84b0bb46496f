"""Chapter 08 benchmark: the autotuner's best training configuration vs the default, side by side.

1. ``autotune`` on this machine (every knob, full sizes): the survivors of pruning are screened
   in parallel on disjoint cores, then the best few and the default are re-measured alone,
   alternately (A B A B), in this one run. Goal (issue 16): best / default samples/s >= 1.0,
   which holds by construction (the default is one of the re-measured); what won, and by how
   much, is the result.
2. The screening speed-up: the first ``SPEEDUP_SET`` survivors screened one after another
   (``at_once=1``) and side by side on disjoint cores (``at_once=0``), alternately, twice each
   (S P S P), so a busy moment of the machine hits both; the best of each is compared.
"""

from __future__ import annotations

import sys
import time

from hpclab.progress import Progress
from hpclab.search.autotune import DEFAULT, AutotuneConfig, run_autotune
from hpclab.search.autotune_plot import label
from hpclab.search.screen import KNOBS, screen

GOAL = 1.0
SPEEDUP_SET = 16


def main() -> int:
    cfg = AutotuneConfig(batches=(32, 256), repeat=5, finalists=3, rounds=3)
    try:
        t0 = time.perf_counter()
        result = run_autotune(cfg, Progress())
        total = time.perf_counter() - t0
        summary = result.records[-1]
        default = next(r for r in result.records if r["status"] == "default")
        kept = [{k: r[k] for k in KNOBS} for r in result.records if r["status"] == "measured"]
        cpus = tuple(sorted(set().union(*(set(c) for c in default["cpus"]))))
        walls: dict[int, list[float]] = {1: [], 0: []}
        for at_once in (1, 0, 1, 0):
            _, wall, _ = screen(kept[:SPEEDUP_SET], cpus, at_once, cfg.side, cfg.repeat, Progress())
            walls[at_once].append(wall)
        serial_s, parallel_s = min(walls[1]), min(walls[0])
    except Exception as exc:  # noqa: BLE001
        print(f"autotune: could not measure: {type(exc).__name__}: {exc}")
        return 1
    print(
        f"{summary['candidates']} candidates, {summary['pruned']} pruned, {summary['measured']} "
        f"measured ({summary['disturbed']} disturbed runs); autotune took {total:.1f} s"
    )
    print("re-measured alone, alternately (median of rounds):")
    for r in (r for r in result.records if r["status"] == "final"):
        screened = next(
            (s["samples_per_s"] for s in result.records
             if s["status"] == "measured" and all(s[k] == r[k] for k in KNOBS)),
            None,
        )  # fmt: skip
        was = f" (screened {screened:.0f})" if screened else ""
        if r["disturbed_rounds"]:
            was += f", {r['disturbed_rounds']} of {cfg.rounds} rounds disturbed"
        print(f"  {r['role']:8s} {label(r)}: {r['samples_per_s']:.0f} samples/s{was}")
    best = summary["best"]
    changed = ", ".join(f"{k} {DEFAULT.get(k, default[k])} -> {best[k]}" for k in KNOBS
                        if best[k] != default[k]) or "nothing: the default won"  # fmt: skip
    print(f"winner: {label(best)}; changed from the default: {changed}")
    print(
        f"screening all {summary['measured']} survivors took {summary['screen_s']:.1f} s in "
        f"parallel (up to {summary['at_once_max']} at once; their runs' own times add up to "
        f"{summary['screen_serial_s']:.1f} s)"
    )
    n = min(SPEEDUP_SET, len(kept))
    print(
        f"screening speed-up on {n} survivors (best of 2, alternated): one after another "
        f"{serial_s:.1f} s, side by side on disjoint cores {parallel_s:.1f} s: "
        f"{serial_s / parallel_s:.2f}x"
    )
    ratio = summary["best_vs_default"]
    print(
        f"best vs default: {ratio:.2f}x by the median of {cfg.rounds} rounds, "
        f"{summary['best_vs_default_fastest']:.2f}x by the fastest round of each "
        f"({summary['disturbed_final_rounds']} final rounds disturbed)"
    )
    print(
        f"autotune: best_vs_default={ratio:.2f} goal>={GOAL} {'PASS' if ratio >= GOAL else 'FAIL'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
