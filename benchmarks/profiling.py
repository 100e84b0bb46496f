"""Chapter 03 benchmark: the fixed patient vs the faulty one, and hpclab's profiler wrappers vs
calling the profilers directly, each side by side in one run.

1. ``profile-fix`` with every fault on, then one fault fewer per stage, in interleaved rounds:
   the gain of each fix, and fixed vs faulty samples/s (goal >= 3x on 2 CPU cores).
2. The profiler overhead table (each tool's slowdown vs the bare run, printed).
3. ``profile_call`` (cProfile + error capture + dump) vs ``cProfile.Profile().runcall`` on the
   same work, interleaved: the wrapper must add <= 5 %.
"""

from __future__ import annotations

import cProfile
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPEATS = 5


def wrapper_overhead() -> float:
    from hpclab.profiling.cprofile_tree import profile_call
    from hpclab.profiling.patient import train

    def work():
        return train("slow-data", steps=40)

    work()
    raw, ours = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(REPEATS):  # interleaved: direct, wrapped, direct, wrapped, ...
            t0 = time.perf_counter()
            cProfile.Profile().runcall(work)
            raw.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            profile_call(work, Path(tmp) / "p.prof")
            ours.append(time.perf_counter() - t0)
    return statistics.median(ours) / statistics.median(raw)


def main() -> int:
    from hpclab import experiments
    from hpclab.profiling.fix import gains_table

    try:
        fix = experiments.run("profile-fix", steps=300, repeat=3)
        print(gains_table(fix).to_string(index=False))
        for r in fix.records:
            if r["kind"] == "workers":
                print(
                    f"workers: {r['stage']:15s} {r['workers']} workers {r['samples_per_s']:9.0f} samples/s"
                )
        stages = [r for r in fix.records if r["kind"] == "stage"]
        ratio = stages[-1]["speedup_vs_faulty"]
        overhead = experiments.run("profiler-overhead", steps=60, repeat=3)
        for r in overhead.records:
            print(f"overhead: {r['tool']:12s} {r['slowdown']:5.2f}x  ({r['records']})")
        wrap = wrapper_overhead()
    except Exception as exc:  # noqa: BLE001 - the benchmark reports, it does not crash
        print(f"profiling: could not measure: {exc}")
        return 1
    print(f"profiling: fixed_vs_faulty={ratio:.2f} goal>=3.0 {'PASS' if ratio >= 3.0 else 'FAIL'}")
    print(f"profiling: wrapper_overhead={wrap:.3f} goal<=1.05 {'PASS' if wrap <= 1.05 else 'FAIL'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
