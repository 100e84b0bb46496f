"""Benchmark: hand-written ring, tree and recursive-doubling all-reduce vs gloo's own (chapter 06).

One run of ``hpclab run allreduce --algorithm builtin,ring,tree,doubling`` (the experiment's own
code path) on 2 gloo ranks, 256 B to 16 MiB, the algorithms interleaved size by size in one
process group so that a slow spell of the machine hits them all alike. Two goals:

- the alpha-beta model of each algorithm (:mod:`hpclab.ddp.collective_model`), fitted on every
  other size, predicts the held-out sizes: median |model - measured| / measured <= 15%;
- each hand-written algorithm within 1.5x of gloo's ``dist.all_reduce`` at 16 MiB.

Usage: python benchmarks/collectives.py   (no arguments, ~1-2 minutes on 2 cores)
"""

from __future__ import annotations

import sys

from hpclab import experiments
from hpclab.ddp.collective_model import held_out_errors, median_errors

BIG = 16 * 2**20
ALGORITHMS = ("builtin", "ring", "tree", "doubling")


def main() -> int:
    try:
        res = experiments.run(
            "allreduce",
            ranks=2,
            min_bytes=256,
            max_bytes=BIG,
            repeat=9,
            device="cpu",
            algorithm=ALGORITHMS,
        )
    except Exception as err:  # noqa: BLE001
        print(f"collectives: could not measure: {err}")
        return 1
    live = [r for r in res.records if r["tier"] == "live"]
    print("2 gloo ranks; seconds per all-reduce (model fitted on the sizes marked *)")
    print(f"{'bytes':>10} " + " ".join(f"{a:>18}" for a in ALGORITHMS))
    for m in sorted({r["bytes"] for r in live}):
        row = {r["algorithm"]: r for r in live if r["bytes"] == m}
        cells = []
        for a in ALGORITHMS:
            r = row[a]
            mark = " " if r.get("held_out") else "*"
            cells.append(f"{r['seconds'] * 1e3:8.3f}/{r['model_seconds'] * 1e3:8.3f}{mark}")
        print(f"{m:>10} " + " ".join(cells) + "   (ms measured/model)")
    errors, spread = median_errors(live), held_out_errors(live)
    at_big = {r["algorithm"]: r["seconds"] for r in live if r["bytes"] == BIG}
    for a in ALGORITHMS[1:]:
        r = next(x for x in live if x["algorithm"] == a)
        print(
            f"{a}: alpha {r['alpha_s'] * 1e6:.1f} us, bandwidth {r['bandwidth_gbps']:.2f} GB/s, "
            f"held-out errors {', '.join(f'{e:.0%}' for e in spread[a])}"
        )
    for a in ALGORITHMS[1:]:
        e = errors[a]
        print(f"collectives: {a}_heldout_median_error={e:.3f} goal<=0.15 {_verdict(e <= 0.15)}")
    for a in ALGORITHMS[1:]:
        ratio = at_big[a] / at_big["builtin"]
        print(f"collectives: {a}_vs_gloo_16MiB={ratio:.2f} goal<=1.5 {_verdict(ratio <= 1.5)}")
    return 0


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


if __name__ == "__main__":
    sys.exit(main())
