"""Benchmark for chapter 09 part 1: the allocator's bytes vs the byte model, several sizes.

For the registry's ``deep`` MLP at three widths (Adam, fp32), at one width in bf16 autocast and
in SGD with momentum, and with activation checkpointing in segments of 1 and 4 blocks, the
allocator probe (:mod:`hpclab.memory.probe`, torch.profiler's memory events) measures the bytes
of the parameters, gradients, optimizer state, activations and the step's peak; the byte model
(:mod:`hpclab.memory.model`) predicts them. One goal per part: the largest
|measured / model - 1| over all configurations within 10%. Byte counts do not depend on the
machine's load, so the ratios are stable.

Run: ``python benchmarks/memory.py`` (about a minute on 2 cores).
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

GOAL = 0.10
PARTS = ("params", "grads", "optimizer", "activations", "peak")


def main() -> int:
    from hpclab.memory.anatomy import measure, modelled

    cases = [(w, "adam", "fp32", None) for w in (256, 512, 1024)]
    cases += [(512, "adam", "bf16", None), (512, "sgd-momentum", "fp32", None)]
    cases += [(256, "sgd", "fp32", 1), (256, "sgd", "fp32", 4)]
    worst = dict.fromkeys(PARTS, 0.0)
    try:
        for width, opt, dtype, every in cases:
            batch = 1024 if every else 256
            cfg = SimpleNamespace(depth=8, batch_size=batch, side=28, optimizer=opt, dtype=dtype)
            got = measure(cfg, width, "cpu", every=every)
            want = modelled(cfg, width, every=every)
            line = []
            for part in PARTS:
                if want[part] == 0:  # plain SGD keeps no state: measured must be ~0 too
                    dev = abs(got[part]) / 2**20
                else:
                    dev = abs(got[part] / want[part] - 1)
                worst[part] = max(worst[part], dev)
                line.append(f"{part} {got[part] / 2**20:.2f}/{want[part] / 2**20:.2f}")
            ck = f", checkpoint every {every}" if every else ""
            print(f"  width {width}, {opt}, {dtype}{ck} (MiB measured/model): " + ", ".join(line))
    except Exception as exc:  # could not measure
        print(f"memory: could not measure: {type(exc).__name__}: {exc}")
        return 1
    for part in PARTS:
        ok = worst[part] <= GOAL
        print(f"memory: {part}_max_deviation={worst[part]:.3f} goal<={GOAL} "
              f"{'PASS' if ok else 'FAIL'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
