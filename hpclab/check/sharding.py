"""Checks for chapter 09 part 2's exercises: ZeRO-1 by hand, the ZeRO memory formula, a plan,
a sharded checkpoint onto another world, and what HSDP sends across nodes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hpclab.check import CheckResult, as_number, exercise_check, failed, formula_check, passed

STEPS, GLOBAL_BATCH, LR, MOMENTUM = 6, 12, 0.1, 0.9


def momentum_update(state: dict, shard: Any, grad: Any) -> None:
    """SGD with momentum on one slice, in place; its state (one buffer) lives in ``state``."""
    buf = state.get("momentum")
    if buf is None or buf.shape != shard.shape:
        buf = state["momentum"] = grad.clone()
    else:
        buf.mul_(MOMENTUM).add_(grad)
    shard.sub_(LR * buf)


def _train(ctx: Any, step: Callable[..., Any] | None) -> dict[str, Any]:
    """STEPS steps of the tiny model held in one flat vector (padded to the ranks); ``step`` is
    the student's ``zero1_step(flat, grad, update)``; ``None`` with one process: the serial
    reference (momentum SGD on the whole vector)."""
    import torch

    from hpclab.ddp.serial_loop import exercise_data, exercise_model
    from hpclab.parallel.tensor_parallel import CommTally
    from hpclab.sharding.probe import StepProbe

    x_all, y_all = exercise_data().tensors
    model = exercise_model()
    rank, world = (ctx.rank, ctx.world_size) if ctx is not None else (0, 1)
    params = list(model.parameters())
    total = sum(p.numel() for p in params)
    flat = torch.zeros(-(-total // world) * world)
    off = 0
    for p in params:  # the parameters become views of the flat vector
        flat[off : off + p.numel()].copy_(p.detach().reshape(-1))
        p.data = flat[off : off + p.numel()].view_as(p)
        off += p.numel()
    state: dict[str, Any] = {}
    sizes: list[int] = []

    def update(shard: Any, grad: Any) -> None:
        sizes.append(int(shard.numel()))
        momentum_update(state, shard, grad)

    tally = CommTally()
    for k in range(STEPS):
        rows = slice(k * GLOBAL_BATCH + rank, (k + 1) * GLOBAL_BATCH, world)
        model.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x_all[rows]), y_all[rows])
        loss.backward()
        grad = torch.cat([p.grad.reshape(-1) for p in params] + [flat.new_zeros(len(flat) - off)])
        with torch.no_grad():
            if step is None:
                update(flat, grad)
            else:
                with StepProbe(tally):
                    step(flat, grad, update)
    return {
        "flat": flat[:total].clone(),
        "sizes": sizes,
        "state_numel": int(state["momentum"].numel()) if "momentum" in state else 0,
        "sent": tally.ring_bytes_per_rank(world) / STEPS,
        "calls": dict(tally.calls),
        "padded": len(flat),
    }


def _zero1_worker(ctx: Any, fn: Callable[..., Any]) -> dict[str, Any]:
    return _train(ctx, fn)


@exercise_check
def zero1_step(fn: Callable[..., Any], world_sizes: tuple[int, ...] = (2, 3)) -> CheckResult:
    """``fn(flat, grad, update)`` on every rank: reduce-scatter the gradient (mean), ``update``
    only this rank's slice of ``flat``, all-gather the slices. Must end on the weights of one
    process (momentum SGD, the whole batch), keep 1/N of the momentum, and send what DDP sends."""
    import torch

    from hpclab.dist import RankError, launch

    serial = _train(None, None)["flat"]
    for n in world_sizes:
        try:
            outs = launch(_zero1_worker, n, args=(fn,), timeout_s=20, deadline_s=120)
        except RankError as err:
            if "NotImplementedError" in err.summary:
                return failed("replace the `raise NotImplementedError(...)` with your code")
            return failed(f"with {n} ranks, rank {err.rank} failed: {err.summary}")
        out = outs[0]
        shard = out["padded"] // n
        spread = max(float((o["flat"] - out["flat"]).abs().max()) for o in outs)
        if spread > 1e-6:
            return failed(
                f"with {n} ranks the ranks ended with different weights (by up to {spread:.2e}): "
                "after the update each rank holds only its own slice new; all-gather the "
                "slices into `flat` so every rank has all of them"
            )
        if any(s != shard for s in out["sizes"]):
            return failed(
                f"with {n} ranks `update` was called on {out['sizes'][0]} values, not on this "
                f"rank's slice of {shard}: ZeRO-1 keeps optimizer state for 1/N of the "
                "parameters only, so update `flat[rank * n : (rank + 1) * n]`"
            )
        if not torch.allclose(out["flat"], serial, rtol=1e-4, atol=1e-6):
            return failed(
                f"with {n} ranks the weights differ from one process by up to "
                f"{float((out['flat'] - serial).abs().max()):.2e}: the slice's gradient must be "
                "the *mean* over ranks (reduce-scatter sums: divide by the world size)"
            )
        ddp = 2 * (n - 1) / n * 4 * out["padded"]
        if out["sent"] > 1.05 * ddp:
            return failed(
                f"with {n} ranks each rank sent {out['sent']:.0f} bytes a step, "
                f"{out['sent'] / ddp:.2f} x DDP's all-reduce ({ddp:.0f}): a reduce-scatter of "
                "the gradient and an all-gather of the weights are enough, no all-reduce"
            )
    return passed(
        f"on {' and '.join(map(str, world_sizes))} ranks your ZeRO-1 step ends on one process's "
        f"weights after {STEPS} steps, keeps 1/N of the momentum per rank and sends what DDP "
        "sends (a reduce-scatter + an all-gather = one all-reduce)."
    )


def zero_gb_reference(psi_b: float, n_d: int, stage: int) -> float:
    from hpclab.sharding.planner import state_bytes

    return state_bytes(psi_b * 1e9, n_d, stage, "mixed")["total"] / 1e9


ZERO_CASES = ((7.5, 64, 0), (7.5, 64, 1), (7.5, 64, 2), (7.5, 64, 3), (1.5, 8, 2), (100, 1024, 1))
ZERO_MISTAKES = (
    (lambda p, n, s: 16 * p / (n if s else 1), "you divided every byte by N_d from stage 1 on: "
     "stage 1 shards only the K = 12 bytes of optimizer state, stage 2 adds the 2 of the "
     "gradient, stage 3 the 2 of the weights"),
    (lambda p, n, s: 16 * p, "the memory never shrinks in your answer: stage s divides part of "
     "the 16 bytes a parameter by N_d"),
    (lambda p, n, s: [16 * p, 4 * p + 16 * p / n, 2 * p + 16 * p / n, 16 * p / n][s],
     "you divided all 16 bytes by N_d and kept the unsharded bytes besides: only the sharded "
     "part is divided, the rest stays whole"),
)  # fmt: skip


@exercise_check
def zero_memory(fn: Callable[..., Any]) -> CheckResult:
    """``fn(psi_b, n_d, stage)``: GB of model states per device (mixed-precision Adam, K = 12)."""
    return formula_check(
        fn, ZERO_CASES, "zero_gb", zero_gb_reference, ZERO_MISTAKES,
        "your formula gives the ZeRO paper's 120, 31.4, 16.6 and 1.88 GB for 7.5 B parameters "
        "on 64 GPUs (Rajbhandari et al. 2020, Table 1), and the other cases.",
        lambda c, got, want: f"zero_gb{c} = {got:.4g} GB, expected {want:.4g} GB: per "
        "parameter 2 bytes of weight, 2 of gradient, 12 of optimizer state; stage s divides "
        "the first s of (optimizer, gradient, weight) by N_d",
    )  # fmt: skip


def hsdp_inter_reference(psi_b: float, nodes: int, per_node: int) -> float:
    from hpclab.sharding.comm_model import comm_bytes

    sent = comm_bytes("hsdp", psi_b * 1e9, nodes * per_node, nodes, weight=2, grad=2)
    return sent["inter_node"] / 1e9


HSDP_CASES = ((7.5, 8, 8), (7.5, 2, 8), (70.0, 16, 8), (1.5, 4, 4), (13.0, 3, 4))
HSDP_MISTAKES = (
    (lambda p, r, s: 3 * (r * s - 1) / (r * s) * 2 * p, "that is ZeRO-3 over every GPU: under "
     "HSDP the all-gathers and reduce-scatters stay inside a node; only the all-reduce of each "
     "GPU's shard of the gradient crosses"),
    (lambda p, r, s: 2 * (r - 1) / r * 2 * p, "you all-reduced the whole gradient across "
     "nodes, as DDP does: each GPU all-reduces only its 1/per_node shard"),
    (lambda p, r, s: 2 * (r * s - 1) / (r * s) * 2 * p / s, "the ring's 2 (n-1)/n counts the "
     "ranks that all-reduce one shard: one GPU a node, so n is the number of nodes, not of GPUs"),
    (lambda p, r, s: (r - 1) / r * 2 * p / s, "an all-reduce sends twice (n-1)/n of its payload "
     "(a reduce-scatter, then an all-gather)"),
)  # fmt: skip


@exercise_check
def hsdp_inter_node(fn: Callable[..., Any]) -> CheckResult:
    """``fn(psi_b, nodes, per_node)``: GB one GPU sends across nodes per step under HSDP
    (bf16 gradients, 2 bytes)."""
    return formula_check(
        fn, HSDP_CASES, "hsdp_inter_gb", hsdp_inter_reference, HSDP_MISTAKES,
        "only each GPU's 1/per_node shard is all-reduced across the nodes: 3.3 GB per GPU and "
        "step for 7.5 B parameters on 8 nodes of 8, where ZeRO-3 over all 64 sends 44 GB over "
        "the same links.",
        lambda c, got, want: f"hsdp_inter_gb{c} = {got:.4g} GB, expected {want:.4g} GB: a ring "
        "all-reduce of a B-byte shard over n nodes sends 2 (n-1)/n B per GPU; the shard is "
        "2 bytes x Psi / per_node",
    )  # fmt: skip


PLAN = {"params_b": 10.0, "gpus": 16, "device": "a100-40"}


@exercise_check
def stage_that_fits(answer: Any) -> CheckResult:
    """The lowest ZeRO stage whose model states fit a 10 B model on 16 x A100 40 GB."""
    stage = as_number(answer, "stage")
    if isinstance(stage, CheckResult):
        return stage
    need = [zero_gb_reference(PLAN["params_b"], PLAN["gpus"], s) for s in range(4)]
    want = next(s for s in range(4) if need[s] <= 40)
    if stage not in range(4):
        return failed(f"stage={answer!r} does not exist: ZeRO has stages 0 (DDP) to 3")
    if stage == want:
        return passed(
            f"stage {want}: {need[want]:.1f} GB per device fits in 40 GB; stage {want - 1} "
            f"needs {need[want - 1]:.1f} GB."
        )
    if need[int(stage)] > 40:
        return failed(
            f"stage {int(stage)} needs {need[int(stage)]:.1f} GB of model states per device, "
            "more than the A100's 40 GB"
        )
    return failed(
        f"stage {int(stage)} fits ({need[int(stage)]:.1f} GB), but a lower stage does too: "
        "each stage costs communication or memory traffic, so take the lowest that fits"
    )


def _saved(where: str) -> dict[str, Any]:
    """A sharded checkpoint written by 2 ranks (FSDP2 weights and Adam) into ``where``."""
    from hpclab.sharding.checkpoint import CheckpointConfig, save_worker
    from hpclab.train import run_spec

    cfg = CheckpointConfig(save_ranks=2, width=32, depth=3, steps=2)
    return run_spec(cfg, 2, worker=save_worker, args=(where,), device="cpu", timeout_s=20)[0]


@exercise_check
def reshard_load(fn: Callable[..., Any], world_sizes: tuple[int, ...] = (1, 3)) -> CheckResult:
    """``fn(net, opt, path)`` fills a fresh sharded model and its Adam from a checkpoint that 2
    ranks saved; on 1 and 3 ranks both must come back bit for bit."""
    import shutil
    import tempfile

    import torch

    from hpclab.dist import RankError
    from hpclab.sharding.checkpoint import CheckpointConfig, load_worker
    from hpclab.train import run_spec

    where = tempfile.mkdtemp(prefix="hpclab-dcp-check-")
    try:
        saved = _saved(where)
        cfg = CheckpointConfig(width=32, depth=3, steps=2)
        for n in world_sizes:
            try:
                got = run_spec(cfg, n, worker=load_worker, args=(where, fn), device="cpu",
                               timeout_s=20, deadline=120)[0]  # fmt: skip
            except RankError as err:
                if "NotImplementedError" in err.summary:
                    return failed("replace the `raise NotImplementedError(...)` with your code")
                return failed(f"with {n} rank(s), rank {err.rank} failed: {err.summary}")
            if not torch.equal(got["params"], saved["params"]):
                return failed(
                    f"on {n} rank(s) the weights are not the saved ones: dcp.load fills, in "
                    "place, a state dict of *this* world's tensors (get_state_dict(net, opt)); "
                    "then set_state_dict puts it into the model and the optimizer"
                )
            if not torch.equal(got["adam"], saved["adam"]):
                return failed(
                    f"on {n} rank(s) the weights came back but Adam's moments did not: a restart "
                    "needs the optimizer's state too (get_state_dict gives both; load both)"
                )
    finally:
        shutil.rmtree(where, ignore_errors=True)
    return passed(
        f"saved on 2 ranks, loaded on {' and '.join(map(str, world_sizes))}: the weights and "
        "Adam's moments come back bit for bit."
    )
