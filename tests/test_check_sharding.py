"""Chapter 09 part 2's checks accept the solutions and reject plausible wrong answers."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from hpclab.check import sharding as check


def zero1_ok(flat, grad, update):
    rank, world = dist.get_rank(), dist.get_world_size()
    n = flat.numel() // world
    mine = torch.empty(n)
    dist.reduce_scatter_tensor(mine, grad)
    mine /= world
    update(flat[rank * n : (rank + 1) * n], mine)
    dist.all_gather_into_tensor(flat, flat[rank * n : (rank + 1) * n].clone())


def zero1_sum(flat, grad, update):  # forgets to divide by the world size
    rank, world = dist.get_rank(), dist.get_world_size()
    n = flat.numel() // world
    mine = torch.empty(n)
    dist.reduce_scatter_tensor(mine, grad)
    update(flat[rank * n : (rank + 1) * n], mine)
    dist.all_gather_into_tensor(flat, flat[rank * n : (rank + 1) * n].clone())


def zero1_no_gather(flat, grad, update):  # each rank keeps only its own slice new
    rank, world = dist.get_rank(), dist.get_world_size()
    n = flat.numel() // world
    mine = torch.empty(n)
    dist.reduce_scatter_tensor(mine, grad)
    update(flat[rank * n : (rank + 1) * n], mine / world)


def zero1_unsharded(flat, grad, update):  # DDP: all-reduce, update everything
    dist.all_reduce(grad)
    update(flat, grad / dist.get_world_size())


def zero1_allreduce_then_shard(flat, grad, update):  # right weights, 1.5x the bytes
    rank, world = dist.get_rank(), dist.get_world_size()
    n = flat.numel() // world
    dist.all_reduce(grad)
    update(flat[rank * n : (rank + 1) * n], grad[rank * n : (rank + 1) * n] / world)
    dist.all_gather_into_tensor(flat, flat[rank * n : (rank + 1) * n].clone())


def test_zero1_step_accepts_the_solution():
    """~6 s: 2 and 3 gloo ranks, 6 steps each."""
    res = check.zero1_step(zero1_ok)
    assert res.passed, res.message


@pytest.mark.parametrize(
    ("fn", "fragment"),
    [
        (zero1_sum, "*mean* over ranks"),
        (zero1_no_gather, "all-gather the slices"),
        (zero1_unsharded, "not on this rank's slice"),
        (zero1_allreduce_then_shard, "no all-reduce"),
    ],
)
def test_zero1_step_rejects_wrong_answers(fn, fragment):
    res = check.zero1_step(fn, world_sizes=(2,))
    assert not res.passed and fragment in res.message, res.message


def zero_gb(psi_b, n_d, stage):
    return psi_b * (2 * (1 if stage < 3 else 1 / n_d) + 2 * (1 if stage < 2 else 1 / n_d)
                    + 12 * (1 if stage < 1 else 1 / n_d))  # fmt: skip


@pytest.mark.parametrize(
    ("fn", "fragment"),
    [
        (zero_gb, None),
        (lambda p, n, s: 16 * p / (n if s else 1), "divided every byte by N_d from stage 1"),
        (lambda p, n, s: 16 * p, "never shrinks"),
        (lambda p, n, s: 12 * p / n if s else 16 * p, "expected"),
    ],
)
def test_zero_memory(fn, fragment):
    res = check.zero_memory(fn)
    if fragment is None:
        assert res.passed and "120, 31.4, 16.6 and 1.88" in res.message, res.message
    else:
        assert not res.passed and fragment in res.message, res.message


@pytest.mark.parametrize(
    ("fn", "fragment"),
    [
        (lambda p, r, s: 2 * (r - 1) / r * 2 * p / s, None),
        (lambda p, r, s: 3 * (r * s - 1) / (r * s) * 2 * p, "ZeRO-3 over every GPU"),
        (lambda p, r, s: 2 * (r - 1) / r * 2 * p, "all-reduced the whole gradient"),
        (lambda p, r, s: 2 * (r * s - 1) / (r * s) * 2 * p / s, "n is the number of nodes"),
        (lambda p, r, s: 2 * (r - 1) / r * 4 * p / s, "expected"),  # fp32 gradients
    ],
)
def test_hsdp_inter_node(fn, fragment):
    res = check.hsdp_inter_node(fn)
    if fragment is None:
        assert res.passed and "3.3 GB per GPU" in res.message, res.message
    else:
        assert not res.passed and fragment in res.message, res.message


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [(2, None), (1, "more than the A100's 40 GB"), (3, "a lower stage does too"),
     (4, "does not exist"), ("two", "should be a number")],
)  # fmt: skip
def test_stage_that_fits(answer, fragment):
    res = check.stage_that_fits(answer)
    if fragment is None:
        assert res.passed and "28.8 GB" in res.message, res.message
    else:
        assert not res.passed and fragment in res.message, res.message


def load_ok(net, opt, path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_sd, optim_sd = get_state_dict(net, opt)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(net, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])


def load_model_only(net, opt, path):  # a restart without Adam's moments
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_sd, optim_sd = get_state_dict(net, opt)
    state = {"model": model_sd}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(net, opt, model_state_dict=state["model"], optim_state_dict=optim_sd)


def load_without_set(net, opt, path):  # fills a copy and never writes it back
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(net, opt)
    state = {"model": {k: v.clone() for k, v in model_sd.items()}, "optim": optim_sd}
    dcp.load(state, checkpoint_id=path)


@pytest.mark.parametrize(
    ("fn", "fragment"),
    [
        (load_ok, None),
        (load_model_only, "Adam's moments did not"),
        (load_without_set, "weights are not the saved ones"),
    ],
)
def test_reshard_load(fn, fragment):
    """~10 s each: saved on 2 ranks, loaded on 1 and 3 (wrong answers: on 3 only)."""
    res = check.reshard_load(fn, world_sizes=(1, 3) if fragment is None else (3,))
    if fragment is None:
        assert res.passed, res.message
    else:
        assert not res.passed and fragment in res.message, res.message
