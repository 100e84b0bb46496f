"""Benchmark: chapter 06's ``ddp`` run on one GPU vs the plain loop, the same work (GPU goal).

Both train the same :class:`hpclab.train.TrainSpec` (``hpclab.ddp.ddp_experiment.train_spec``
of the run's config): same model ("large"), samples, epochs, batch, warm-up and steps; the same
host DataLoader with pinned batches copied to the GPU inside each step; the same ``train_step``.
hpclab times the step with CUDA events (``time_fn``), the plain loop
(:func:`hpclab.ddp.plain.plain_loop`) with ``perf_counter`` between two ``synchronize()``.
Five interleaved rounds per batch size (256 and 2048), 20 warm-up steps each; reported:
hpclab's median step over the plain loop's. Goals: within 5% both ways (>= 0.95 and <= 1.05). The first H200 run, before the
two did the same work, gave 1.10 (batch 256) and 0.89 (batch 2048).

Without a GPU every goal says "not measured" in one line, and the script exits 0.

Usage: python benchmarks/ddp_gpu.py   (no arguments; ~1 minute on a GPU node)
"""

from __future__ import annotations

import statistics
import sys
from functools import partial

from _goals import goal_line, report

# The first H100 run (3 rounds, 3 warm-up steps) saw rounds 1.7x apart on both sides: more
# rounds, and 20 warm-up steps so that the GPU's clocks are up before timing (idle: ~345 MHz)
BATCHES, ROUNDS, STEPS, WARMUP = (256, 2048), 5, 40, 20


def measure(batch: int) -> float:
    """Median over rounds of hpclab's step / the plain loop's step, interleaved."""
    from hpclab import experiments
    from hpclab.ddp.ddp_experiment import DDPConfig, train_spec
    from hpclab.ddp.plain import plain_loop
    from hpclab.dist import launch

    params = dict(
        ranks=1, model="large", batch_size=batch, steps=STEPS, warmup=WARMUP, device="cuda"
    )
    spec = train_spec(DDPConfig.create(**params))
    ours, plain = [], []
    for rnd in range(ROUNDS):
        rec = experiments.run("ddp", **params).records[0]
        assert rec["device"] == "cuda:0", rec["device"]
        ours.append(rec["step_s"])
        plain.append(launch(plain_loop, 1, args=(spec,), device="cuda")[0]["step_s"])
        print(f"batch {batch}, round {rnd}: hpclab {ours[-1] * 1e3:.2f} ms, "
              f"plain {plain[-1] * 1e3:.2f} ms per step")  # fmt: skip
    return statistics.median(ours) / statistics.median(plain)


def batch_goal(batch: int) -> list[str]:
    ratio = measure(batch)
    metric = f"hpclab_over_plain_b{batch}"
    return [goal_line("ddp_gpu", metric, ratio, op, t) for op, t in ((">=", 0.95), ("<=", 1.05))]


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        for batch in BATCHES:
            for op, target in ((">=", 0.95), ("<=", 1.05)):
                print(f"ddp_gpu: hpclab_over_plain_b{batch} not measured (no GPU visible) "
                      f"goal{op}{target}")  # fmt: skip
        return 0
    return report("ddp_gpu", [partial(batch_goal, b) for b in BATCHES])


if __name__ == "__main__":
    sys.exit(main())
