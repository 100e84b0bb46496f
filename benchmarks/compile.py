"""Chapter 03 benchmark: torch.compile vs eager, and hpclab's measurement vs a plain script.

Both sides train the same model (``hpclab.train``'s ``large`` MLP, 784-1024-1024-10, batch 256)
on the CPU with ``TORCHINDUCTOR_COMPILE_THREADS=1``, in interleaved rounds (eager through
hpclab, compiled through hpclab, compiled by the plain loop below, which goes first every other
round), so that background load hits all three alike. Each round gives a speed-up and a ratio; the medians are reported with their
range over the rounds.

1. speed-up = eager step / compiled step (``hpclab run compile``'s figure); goal >= 1.
2. hpclab's compiled step time / the plain script's: goal within 5 %.

Usage: python benchmarks/compile.py   (no arguments; ~2 minutes on 2 quiet cores)
"""

from __future__ import annotations

import os

os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"  # before torch._inductor reads it

import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from hpclab.profiling import compile_experiment as C  # noqa: E402

MODEL, BATCH, STEPS, ROUNDS = "large", 256, 15, 5


def plain_compiled_step_s() -> float:
    """What a student writes: compile, warm up, time each step with perf_counter, median."""
    x, y = C.batch(BATCH, "cpu")
    net = torch.compile(C.build(MODEL, False, "cpu"))
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    times = []
    for i in range(2 + STEPS):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        loss.item()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} (range {min(values):.3f}-{max(values):.3f})"


def main() -> int:
    speedups, ratios = [], []
    for k in range(ROUNDS):
        with C.one_compile_thread():
            if k % 2:  # alternate who goes first: a load that drifts hits both sides alike
                plain = plain_compiled_step_s()
            eager = C.measure(MODEL, BATCH, "eager", STEPS, "cpu")["step_s"]
            ours = C.measure(MODEL, BATCH, "default", STEPS, "cpu")["step_s"]
            if not k % 2:
                plain = plain_compiled_step_s()
        torch._dynamo.reset()
        speedups.append(eager / ours)
        ratios.append(ours / plain)
        print(f"round: eager {eager * 1e3:.2f} ms, hpclab compiled {ours * 1e3:.2f} ms, "
              f"plain compiled {plain * 1e3:.2f} ms")  # fmt: skip
    if not ratios:
        print("compile: could not measure")
        return 1
    speedup, ratio = statistics.median(speedups), statistics.median(ratios)
    print(f"speed-up over eager, {ROUNDS} rounds: {spread(speedups)}")
    print(f"hpclab / plain step time, {ROUNDS} rounds: {spread(ratios)}")
    print(f"compile: speedup={speedup:.3f} goal>=1.0 {'PASS' if speedup >= 1.0 else 'FAIL'}")
    off = abs(ratio - 1.0)
    print(f"compile: hpclab_vs_plain_off={off:.3f} goal<=0.05 {'PASS' if off <= 0.05 else 'FAIL'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
