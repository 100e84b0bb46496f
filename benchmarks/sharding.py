"""Benchmark: ZeRO-3's bytes per rank vs DDP's, and hpclab's FSDP step vs a plain script (ch. 09).

1. State bytes per rank (parameters + gradients + Adam state between steps) of FSDP2's ZeRO-3
   on 2 gloo ranks against DDP's, from hpclab's ``fsdp`` experiment. The ZeRO model says
   16 Psi / 2 against 16 Psi: 0.5. Goal: <= 0.55.
2. Per-step time of 2 gloo ranks training the same model (``deep``, width 512, 8 layers), batch,
   Adam and steps under ``fully_shard``: hpclab's ``fsdp --strategy zero3`` (forked ranks,
   DataLoader, ``train_step``, ``time_fn``; its DDP reference run first) against
   ``benchmarks/fsdp_plain.py`` under torchrun. Interleaved round by round; each side keeps its
   least-disturbed (fastest) round, since load on a shared machine only ever adds time.
   Goal: ratio <= 1.10. What closed the gap (three quiet runs had given 1.27, 1.13 and 1.17):
   the ranks' session. torchrun starts each worker in a session of its own; hpclab's ranks
   stayed in the launching process's, and with the kernel's autogroup scheduling (on by default)
   CPU time is shared between sessions first, so a rank woken by one of FSDP2's many small
   collectives waited longer for its core (the probes saw it as ~11 ms a step more in gloo's
   ``wait``). The same hpclab worker, 5 interleaved rounds on the quiet VM: median step 83.9 ms
   in the launcher's session, 77.0 ms with a session per rank (now the launcher's way), 72.0 ms
   under torchrun. Not the cause (each varied alone, the gap stayed): fork, spawn or forkserver;
   the parent's preload; ``GLOO_SOCKET_IFNAME=lo``; the FileStore (torchrun with hpclab's
   FileStore: 73.5 ms); the rank's log redirection and ``prctl``; the parent's 50 ms poll;
   ``OMP_NUM_THREADS=1`` from the start; DDP run before ZeRO-3 in the same ranks.

Usage: python benchmarks/sharding.py   (no arguments, ~2 minutes on 2 cores)
"""

from __future__ import annotations

import sys
from pathlib import Path

from _torchrun import torchrun_step_s  # beside this file

# 5 rounds: with 3, the fastest round of each side still moved by up to 10% run to run
WIDTH, DEPTH, BATCH, STEPS, WARMUP, ROUNDS = 512, 8, 32, 20, 3, 5
HERE = Path(__file__).resolve().parent


def hpclab_run(strategies: tuple[str, ...]) -> dict[str, dict]:
    from hpclab import experiments

    res = experiments.run(
        "fsdp", strategy=strategies, ranks=2, width=WIDTH, depth=DEPTH, batch_size=BATCH,
        steps=STEPS, warmup=WARMUP,
    )  # fmt: skip
    return {r["strategy"]: r for r in res.records}


def plain_step() -> float:
    return torchrun_step_s(HERE / "fsdp_plain.py", WIDTH, DEPTH, BATCH, STEPS, WARMUP)


def main() -> int:
    ours, theirs = [], []
    try:
        rows = hpclab_run(("ddp", "zero3"))
        state_ratio = rows["zero3"]["state_bytes_per_rank"] / rows["ddp"]["state_bytes_per_rank"]
        for _ in range(ROUNDS):
            ours.append(hpclab_run(("zero3",))["zero3"]["step_s"])
            theirs.append(plain_step())
    except Exception as err:  # noqa: BLE001 - report and exit 1: nothing measured
        print(f"sharding: could not measure: {err}")
        return 1
    ratio = min(ours) / min(theirs)
    print(f"deep {WIDTH}x{DEPTH}, batch {BATCH}/rank, Adam, 2 gloo ranks, {STEPS} timed steps")
    print(f"state bytes per rank: ddp {rows['ddp']['state_bytes_per_rank']:,}, "
          f"zero3 {rows['zero3']['state_bytes_per_rank']:,}")  # fmt: skip
    print(f"hpclab zero3 step ms: {', '.join(f'{x * 1e3:.2f}' for x in ours)}")
    print(f"plain fully_shard ms: {', '.join(f'{x * 1e3:.2f}' for x in theirs)}")
    print(
        f"sharding: zero3_state_vs_ddp={state_ratio:.3f} goal<=0.55 "
        f"{'PASS' if state_ratio <= 0.55 else 'FAIL'}"
    )
    print(
        f"sharding: fsdp_step_ratio_vs_plain={ratio:.3f} goal<=1.10 "
        f"{'PASS' if ratio <= 1.10 else 'FAIL'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
