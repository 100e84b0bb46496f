"""Checks for chapter 06's exercises: DDP conversion, ring all-reduce, busbw, efficiency."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hpclab.check import (
    CheckResult,
    error_line,
    exercise_check,
    failed,
    passed,
)


def _max_diff(a: Any, b: Any) -> float:
    return float((a - b).abs().max())


@exercise_check
def ddp_training(worker: Callable[..., Any], ranks: tuple[int, ...] = (2, 4)) -> CheckResult:
    """Run ``worker(ctx, steps, per_rank_batch, seed) -> flat params`` on each number of
    ``ranks`` and compare with one process trained on the global batch
    (``ranks x per_rank_batch``). Two rank counts, so a hard-coded 2 cannot pass."""
    for n in ranks:
        result = _ddp_case(worker, n)
        if not result.passed:
            return result
    from hpclab.ddp import serial_loop as ex

    counts = " and ".join(map(str, ranks))
    batches = " and ".join(str(n * ex.PER_RANK_BATCH) for n in ranks)
    return passed(
        f"{counts} DDP ranks with batch {ex.PER_RANK_BATCH} each end with the same weights as one "
        f"process with batch {batches} ({ex.STEPS} steps, more than one epoch)."
    )


def _ddp_case(worker: Callable[..., Any], ranks: int) -> CheckResult:
    from hpclab.ddp import serial_loop as ex
    from hpclab.dist import RankError
    from hpclab.train import run_spec

    try:
        runs = run_spec(
            ex.exercise_spec(),
            ranks,
            worker=_ddp_entry,
            args=(worker,),
            timeout_s=20,
            deadline=120,
        )
    except RankError as err:
        text = error_line(err)
        hint = ""
        if "Invalid rank" in str(err):
            hint = ": the sampler needs num_replicas=ctx.world_size (not a fixed number)"
        return failed(f"on {ranks} ranks your training failed: {text}{hint}")
    outs = [out for out, _ in runs]
    biggest = max((max(seen, default=0) for _, seen in runs), default=0)
    wrong = _replica_slip(outs, biggest, ranks)
    if wrong:
        return failed(wrong)
    return _against_one_process(outs[0], ranks)


def _replica_slip(outs: list, biggest: int, ranks: int) -> str | None:
    """What the ranks' results say on their own: each rank's share of the batch, that each
    returns a parameter tensor, and that the replicas agree; None when all is well."""
    import torch

    from hpclab.ddp import serial_loop as ex

    if biggest > ex.PER_RANK_BATCH:
        # the weights alone cannot tell: n ranks that each train on the whole global batch
        # end exactly where one process does, having done n times the work
        return (
            f"on {ranks} ranks a rank's model saw {biggest} samples in one step; each rank's "
            f"share is per_rank_batch = {ex.PER_RANK_BATCH}. Ranks that each process the whole "
            "global batch end with the right weights but do all the work n times over: the "
            "DataLoader takes batch_size=per_rank_batch, and the DistributedSampler deals "
            "each rank its own samples"
        )
    if not all(isinstance(o, torch.Tensor) for o in outs):
        kinds = sorted({type(o).__name__ for o in outs})
        return f"return the flat parameters (a tensor, e.g. parameters_to_vector(...)); got {kinds}"
    if any(o.shape != outs[0].shape for o in outs):
        return "ranks returned parameter vectors of different sizes"
    spread = max(_max_diff(outs[0], o) for o in outs[1:])
    if spread > 1e-6:
        return (
            f"the {ranks} replicas ended with different weights (max |difference| {spread:.2e}): "
            "wrap the model in DistributedDataParallel so gradients are averaged in backward"
        )
    return None


def _against_one_process(mine: Any, ranks: int) -> CheckResult:
    """Rank 0's weights against one process on the global batch, and against the serial runs
    that reproduce the usual slips (no sampler, no set_epoch)."""
    import torch

    from hpclab.ddp import serial_loop as ex

    global_batch = ranks * ex.PER_RANK_BATCH
    ref = ex.train_serial(ex.STEPS, global_batch)
    if mine.shape != ref.shape:
        return failed(f"expected {ref.numel()} parameters (the tiny model), got {mine.numel()}")
    if torch.allclose(mine, ref, rtol=1e-4, atol=1e-5):
        return passed("")
    if torch.allclose(mine, ex.train_serial(ex.STEPS, ex.PER_RANK_BATCH), rtol=1e-4, atol=1e-5):
        return failed(
            "every rank trained on the same samples: give the DataLoader a DistributedSampler "
            "with num_replicas=ctx.world_size and rank=ctx.rank, so each rank gets its own share"
        )
    no_epoch = ex.train_serial(ex.STEPS, global_batch, reshuffle=False)
    if torch.allclose(mine, no_epoch, rtol=1e-4, atol=1e-5):
        return failed(
            "the first epoch matches but the next ones repeat its order: call "
            "sampler.set_epoch(epoch) at the start of every epoch"
        )
    return failed(
        f"on {ranks} ranks the weights differ from one process with batch {global_batch} by up "
        f"to {_max_diff(mine, ref):.2e}; check: batch_size per rank = per_rank_batch, sampler "
        f"shuffle=True with seed=seed, lr unchanged ({ex.LR}), exactly `steps` steps"
    )


def _ddp_entry(ctx: Any, spec: Any, worker: Callable[..., Any]) -> tuple:
    """The student's worker (given the exercise spec's steps, per-rank batch and seed), and the
    batch sizes its model's first layer saw in training (grad enabled) on this rank."""
    import torch

    from hpclab.ddp import serial_loop as ex

    seen: list[int] = []

    def record(module: Any, args: tuple) -> None:
        x = args[0] if args else None
        if not torch.is_grad_enabled():
            return  # an evaluation under no_grad is not a training step
        if isinstance(module, torch.nn.Linear) and module.in_features == ex.FEATURES:
            if isinstance(x, torch.Tensor) and x.dim() == 2:
                seen.append(int(x.shape[0]))

    hook = torch.nn.modules.module.register_module_forward_pre_hook(record)
    try:
        out = worker(ctx, spec.steps, spec.per_rank_batch, spec.seed)
    finally:
        hook.remove()
    return out, seen


def _ring_check_worker(ctx: Any, fn: Callable[..., Any], numels: tuple[int, ...]) -> list:
    import torch
    import torch.distributed as dist

    from hpclab.check.comm_probe import CommProbe

    n = ctx.world_size
    out = []
    for numel in numels:
        x = torch.arange(numel, dtype=torch.float32) * (ctx.rank + 1) + ctx.rank
        ref = x.clone()
        dist.all_reduce(ref)
        mine = x.clone()
        with CommProbe() as probe:
            ret = fn(mine, ctx.rank, n)
        tol = 1e-4 * max(1, numel)

        def close(a: Any, b: Any, tol: float = tol) -> bool:
            return bool(torch.allclose(a, b, rtol=0, atol=tol))

        out.append(
            {
                "numel": numel,
                "err": float((mine - ref).abs().max()),
                "frac": float((mine == ref).float().mean()),
                "unchanged": bool(torch.equal(mine, x)),
                "mean": close(mine, ref / n),
                "returned": isinstance(ret, torch.Tensor)
                and ret is not mine
                and ret.shape == ref.shape
                and close(ret, ref),
                "chunks_ok": [
                    close(a, b)
                    for a, b in zip(mine.tensor_split(n), ref.tensor_split(n), strict=True)
                ],
                "collectives": probe.collectives(),
                "send_peers": sorted(probe.peers("send", "isend")),
                "recv_peers": sorted(probe.peers("recv", "irecv")),
                "sent": probe.sent_numel(),
            }
        )
    return out


def _ring_traffic(n: int, rank: int, row: dict) -> str | None:
    """What a right sum reached by the wrong communication sent (the result alone cannot say)."""
    numel = row["numel"]
    where = f"with {n} ranks and {numel} elements, rank {rank}"
    if row["collectives"]:
        return (
            f"{where} got the right sum by calling dist.{row['collectives'][0]}: the exercise "
            "builds the all-reduce itself, from dist.isend and dist.recv along the ring"
        )
    right, left = (rank + 1) % n, (rank - 1) % n
    ring = ({right}, {left}) if n > 1 else (set(), set())
    sends, recvs = set(row["send_peers"]), set(row["recv_peers"])
    if sends and (sends, recvs) not in (ring, ring[::-1]):
        return (
            f"{where} sent to ranks {sorted(sends)} and received from {sorted(recvs)}: in a "
            f"ring each rank sends only to its right neighbour ({right}) and receives only "
            f"from its left ({left})"
        )
    most = 2 * (n - 1) * -(-numel // n)  # 2(n-1) chunks of at most ceil(numel / n) elements
    if row["sent"] > most:
        return (
            f"{where} sent {row['sent']} elements; a ring all-reduce sends 2(n-1) chunks of "
            f"numel/n, {most} at most: each step passes one chunk, not the whole tensor"
        )
    if numel >= n and not sends:
        return (
            f"{where} got the right sum but the check saw no dist.isend or dist.send: call "
            "them as dist.isend / dist.recv (import torch.distributed as dist)"
        )
    return None


def _ring_advice(n: int, rank: int, row: dict) -> str | None:
    numel = row["numel"]
    if row["err"] <= 1e-4 * max(1, numel):
        return _ring_traffic(n, rank, row)
    where = f"with {n} ranks and {numel} elements, rank {rank}"
    if row["unchanged"] and row["returned"]:
        return (
            f"{where} returned the right sum but left `tensor` unchanged: an all-reduce works in "
            "place (write into the chunks, which are views of the tensor)"
        )
    if row["unchanged"]:
        return f"{where} left the tensor unchanged: reduce in place (add_/copy_ into the chunks)"
    if row["mean"]:
        return f"{where} holds the average (sum / {n}); dist.all_reduce sums, as yours should"
    ok = row["chunks_ok"]
    if numel >= n and sum(ok) == 1:
        return (
            f"{where} has only chunk {ok.index(True)} of {n} right: the reduce-scatter works; "
            "now add the all-gather phase"
        )
    if numel >= n and any(ok):
        wrong = [i for i, good in enumerate(ok) if not good]
        return (
            f"{where}: chunks {wrong} of {n} are wrong, the others right: check which chunk "
            "each step sends and which it receives"
        )
    return (
        f"{where} differs from dist.all_reduce by up to {row['err']:.3g} "
        f"({row['frac']:.0%} of elements right, no chunk entirely right)"
    )


@exercise_check
def ring(fn: Callable[..., Any], world_sizes: tuple[int, ...] = (2, 3, 4)) -> CheckResult:
    """``fn(tensor, rank, world_size)`` must sum ``tensor`` over ranks in place, like
    ``dist.all_reduce``, for sizes that do and do not divide by the world size."""
    from hpclab.dist import RankError, launch

    if not callable(fn):
        return failed(f"pass your function itself, got {type(fn).__name__}")
    numels = (4099, 1000, 7, 1)  # largest first: their errors say the most
    for n in world_sizes:
        try:
            outs = launch(_ring_check_worker, n, args=(fn, numels), timeout_s=10, deadline_s=60)
        except RankError as err:
            text = str(err).lower()
            hint = ""
            if "timed out" in text or "deadline" in text or "timeout" in text:
                hint = " (a deadlock? every rank must send to the right AND receive from the left "
                hint += "in each step: dist.isend for the send, then dist.recv)"
            return failed(f"with {n} ranks: {error_line(err)}{hint}")
        for rank, rows in enumerate(outs):
            for row in rows:
                advice = _ring_advice(n, rank, row)
                if advice:
                    return failed(advice)
    return passed(
        f"your ring all-reduce equals dist.all_reduce on {', '.join(map(str, world_sizes))} "
        "ranks, for sizes that do and do not divide evenly."
    )
