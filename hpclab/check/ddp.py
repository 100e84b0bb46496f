"""Checks for chapter 06's exercises: DDP conversion, ring all-reduce, busbw, efficiency."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hpclab.check import CheckResult, as_number, failed, near, passed


def _max_diff(a: Any, b: Any) -> float:
    return float((a - b).abs().max())


def ddp_training(worker: Callable[..., Any], ranks: int = 2) -> CheckResult:
    """Run ``worker(ctx, steps, per_rank_batch, seed) -> flat params`` on ``ranks`` ranks and
    compare with one process trained on the global batch (``ranks x per_rank_batch``)."""
    import torch

    from hpclab.ddp import serial_loop as ex
    from hpclab.ddp.ddp_experiment import preload
    from hpclab.dist import RankError, launch

    preload()  # forked ranks inherit DDP's imports instead of paying for them each
    try:
        outs = launch(
            worker, ranks, args=(ex.STEPS, ex.PER_RANK_BATCH, ex.SEED), timeout_s=20, deadline_s=120
        )
    except RankError as err:
        if "NotImplementedError" in err.summary:
            return failed("replace the `raise NotImplementedError(...)` with your DDP code")
        return failed(f"rank {err.rank} failed: {err.summary}")
    if not all(isinstance(o, torch.Tensor) for o in outs):
        kinds = sorted({type(o).__name__ for o in outs})
        return failed(
            f"return the flat parameters (a tensor, e.g. parameters_to_vector(...)); got {kinds}"
        )
    if any(o.shape != outs[0].shape for o in outs):
        return failed("ranks returned parameter vectors of different sizes")
    spread = max(_max_diff(outs[0], o) for o in outs[1:])
    if spread > 1e-6:
        return failed(
            f"the {ranks} replicas ended with different weights (max |difference| {spread:.2e}): "
            "wrap the model in DistributedDataParallel so gradients are averaged in backward"
        )
    mine = outs[0]
    global_batch = ranks * ex.PER_RANK_BATCH
    ref = ex.train_serial(ex.STEPS, global_batch)
    if mine.shape != ref.shape:
        return failed(f"expected {ref.numel()} parameters (the tiny model), got {mine.numel()}")
    if torch.allclose(mine, ref, rtol=1e-4, atol=1e-5):
        return passed(
            f"{ranks} DDP ranks with batch {ex.PER_RANK_BATCH} each end with the same weights as "
            f"one process with batch {global_batch} ({ex.STEPS} steps, 2 epochs)."
        )
    if torch.allclose(mine, ex.train_serial(ex.STEPS, ex.PER_RANK_BATCH), rtol=1e-4, atol=1e-5):
        return failed(
            "every rank trained on the same samples: give the DataLoader a DistributedSampler "
            "with num_replicas=ctx.world_size and rank=ctx.rank, so each rank gets its own share"
        )
    no_epoch = ex.train_serial(ex.STEPS, global_batch, reshuffle=False)
    if torch.allclose(mine, no_epoch, rtol=1e-4, atol=1e-5):
        return failed(
            "the first epoch matches but the second repeats its order: call "
            "sampler.set_epoch(epoch) at the start of every epoch"
        )
    return failed(
        f"the weights differ from one process with batch {global_batch} by up to "
        f"{_max_diff(mine, ref):.2e}; check: batch_size per rank = per_rank_batch, sampler "
        f"shuffle=True with seed=seed, lr unchanged ({ex.LR}), exactly `steps` steps"
    )


def _ring_check_worker(ctx: Any, fn: Callable[..., Any], numels: tuple[int, ...]) -> list:
    import torch
    import torch.distributed as dist

    out = []
    for numel in numels:
        x = torch.arange(numel, dtype=torch.float32) * (ctx.rank + 1) + ctx.rank
        ref = x.clone()
        dist.all_reduce(ref)
        mine = x.clone()
        fn(mine, ctx.rank, ctx.world_size)
        out.append(
            (
                numel,
                float((mine - ref).abs().max()),
                float((mine == ref).float().mean()),
                bool(torch.equal(mine, x)),
            )
        )
    return out


def ring(fn: Callable[..., Any], world_sizes: tuple[int, ...] = (2, 3, 4)) -> CheckResult:
    """``fn(tensor, rank, world_size)`` must sum ``tensor`` over ranks in place, like
    ``dist.all_reduce``, for sizes that do and do not divide by the world size."""
    from hpclab.dist import RankError, launch

    numels = (4099, 1000, 7, 1)  # largest first: their errors say the most
    for n in world_sizes:
        try:
            outs = launch(_ring_check_worker, n, args=(fn, numels), timeout_s=10, deadline_s=60)
        except RankError as err:
            if "NotImplementedError" in err.summary:
                return failed("replace the `raise NotImplementedError(...)` with your ring")
            hint = ""
            if "timed out" in err.summary.lower() or "deadline" in err.summary:
                hint = " (a deadlock? every rank must send to the right AND receive from the left "
                hint += "in each step: use dist.isend for the send)"
            return failed(f"with {n} ranks, rank {err.rank} failed: {err.summary}{hint}")
        for rank, rows in enumerate(outs):
            for numel, err, frac, unchanged in rows:
                if err <= 1e-4 * max(1, numel):
                    continue
                where = f"with {n} ranks and {numel} elements, rank {rank}"
                if unchanged and numel >= n:
                    return failed(
                        f"{where} left the tensor unchanged: reduce in place "
                        "(add_/copy_ into the chunks, which are views of the tensor)"
                    )
                if abs(frac - 1 / n) < 0.15 and numel >= 1000:
                    return failed(
                        f"{where} has only about 1/{n} of the elements right: the "
                        "reduce-scatter works; now add the all-gather phase"
                    )
                return failed(
                    f"{where} differs from dist.all_reduce by up to {err:.3g} "
                    f"({frac:.0%} of elements right); check the chunk indices per step"
                )
    return passed(
        f"your ring all-reduce equals dist.all_reduce on {', '.join(map(str, world_sizes))} "
        "ranks, for sizes that do and do not divide evenly."
    )


def busbw(value_gbps: Any, nbytes: float, seconds: float, ranks: int) -> CheckResult:
    """Bus bandwidth in GB/s of an all-reduce of ``nbytes`` taking ``seconds`` on ``ranks``."""
    value = as_number(value_gbps, "my_busbw_gbps")
    if isinstance(value, CheckResult):
        return value
    algbw = nbytes / seconds / 1e9
    factor = 2 * (ranks - 1) / ranks
    expected = algbw * factor
    formula = f"{nbytes:.0f} B / {seconds:.4g} s / 1e9 x 2({ranks}-1)/{ranks} = {expected:.3f} GB/s"
    if value > 0 and near(value / expected, 1.0, 0.01):
        return passed("busbw = algbw x 2(n-1)/n, in GB/s (1e9 bytes/s), as nccl-tests reports it.")
    if value <= 0:
        return failed(f"a bandwidth is positive; expected {formula}")
    ratio = value / expected
    hints = []
    if near(value / algbw, 1.0, 0.01) and ranks != 2:
        hints.append(
            "that is algbw (bytes / time): multiply by 2(n-1)/n, the share of the "
            "message each link carries in a ring all-reduce"
        )
    elif near(value / (2 * algbw), 1.0, 0.01) and ranks > 1:
        hints.append("you used the factor 2; it is 2(n-1)/n")
    elif near(ratio, 2**30 / 1e9) or near(ratio, 1e9 / 2**30):
        hints.append("GB here means 1e9 bytes (as nccl-tests prints), not GiB (2**30)")
    elif near(ratio, 8.0):
        hints.append("that looks like Gbit/s: bytes, not bits")
    elif near(ratio, 1000.0):
        hints.append("that looks like MB/s; the answer is in GB/s")
    elif near(ratio, (ranks / (2 * (ranks - 1))) ** 2):
        hints.append("you divided by 2(n-1)/n; multiply by it")
    if not hints:
        hints.append(f"it is {ratio:.3g}x the expected value")
    return failed("; ".join(hints) + f". Expected: {formula}.")


def efficiency_prediction(
    value: Any, compute_s: float, nbytes: float, ranks: int, alpha_s: float, bandwidth_bps: float
) -> CheckResult:
    """Predicted weak-scaling efficiency: compute / (compute + ring all-reduce), no overlap."""
    from hpclab.ddp.cost_model import ring_allreduce_s

    v = as_number(value, "my_efficiency")
    if isinstance(v, CheckResult):
        return v
    comm = ring_allreduce_s(nbytes, ranks, alpha_s, bandwidth_bps)
    expected = compute_s / (compute_s + comm)
    formula = (
        f"{compute_s:.4g} / ({compute_s:.4g} + 2({ranks}-1) x {alpha_s:.3g} + "
        f"2({ranks}-1)/{ranks} x {nbytes:.0f} / {bandwidth_bps:.3g}) = {expected:.3f}"
    )
    if near(v, expected, 0.01):
        return passed(
            "compute / (compute + ring all-reduce) matches the model within 1% (see the numbers below)."
        )
    hints = []
    plain = compute_s / (compute_s + alpha_s + nbytes / bandwidth_bps)
    if near(v, plain, 0.01):
        hints.append(
            "you sent the message once (alpha + m/B); a ring all-reduce takes "
            "2(n-1) steps of m/n bytes each"
        )
    if near(v, comm / (compute_s + comm), 0.01):
        hints.append("that is the communication share; efficiency is the compute share")
    if near(v, ranks * expected, 0.01) and ranks > 1:
        hints.append("that is the speedup (n x efficiency); divide by n")
    if near(
        v,
        compute_s / (compute_s + ring_allreduce_s(nbytes * 8, ranks, alpha_s, bandwidth_bps)),
        0.01,
    ):
        hints.append("bytes, not bits: the bandwidth is in bytes/s")
    if not 0 < v <= 1:
        hints.append("an efficiency lies between 0 and 1")
    if not hints:
        hints.append(f"you have {v:.3f}")
    return failed("; ".join(hints) + f". Expected: {formula}.")
