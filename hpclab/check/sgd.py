"""Checks for chapter 05's exercises: the Hogwild worker loop, the server's apply-gradient with
version tracking, and the stale-synchronous (bounded staleness) rule."""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable
from typing import Any

import torch

from hpclab.check import CheckResult, error_line, exercise_check, failed, passed
from hpclab.train import flat_params

# --- (a) the Hogwild worker loop ----------------------------------------------------------

_FEATURES, _NNZ, _STEPS, _LR = 400, 5, 300, 1.0


def _half_problems(seed: int = 5):
    """Two problems over one feature space: rank 0's samples use features [0, 200), rank 1's
    [200, 400). If both halves of the shared weights move, both processes wrote into them."""
    from hpclab.sgd.problems import Problem, SparseLogReg, sparse_data

    x, y, _ = sparse_data(4000, _FEATURES // 2, _NNZ, seed=seed)
    halves = []
    for r in range(2):
        xr = x + r * (_FEATURES // 2)
        halves.append(
            Problem(
                f"half{r}",
                xr[:3000],
                y[:3000],
                xr[3000:],
                y[3000:],
                functools.partial(SparseLogReg, _FEATURES),
                torch.nn.functional.binary_cross_entropy_with_logits,
                binary=True,
            )
        )
    return halves


def _entry(ctx, fn, problems, model, steps, lr):
    fn(ctx, problems[ctx.rank], model, steps, lr)
    return _BACKWARDS.get(os.getpid(), 0)


_BACKWARDS: dict[int, int] = {}  # pid -> backward passes that reached the shared bias


def _count_backward(_param: torch.Tensor) -> None:
    _BACKWARDS[os.getpid()] = _BACKWARDS.get(os.getpid(), 0) + 1


def _mean_loss(problems, model) -> float:
    return sum(p.loss(model) for p in problems) / len(problems)


# The update rule itself, exactly: on a problem whose samples are all the same, every minibatch
# has the same gradient, so the weights after k steps do not depend on which samples a loop
# draws. Each of 2 processes trains its own copy (forked, not shared) and must end where plain
# SGD with the same steps and lr ends.
_EXACT_STEPS = 12


def _constant_problem(rank: int):
    from hpclab.sgd.problems import Problem, SparseLogReg

    x = (torch.arange(_NNZ) * 3 + 7 * rank).repeat(64, 1)  # [64, nnz] feature ids, all rows equal
    y = torch.ones(64)
    return Problem(
        f"constant{rank}",
        x,
        y,
        x[:8],
        y[:8],
        functools.partial(SparseLogReg, _FEATURES),
        torch.nn.functional.binary_cross_entropy_with_logits,
        binary=True,
    )


def _private_entry(ctx, fn, problems, model, steps, lr):
    fn(ctx, problems[ctx.rank], model, steps, lr)  # `model` is this process's own copy
    return flat_params(model)


def _sgd_trajectory(problem, model, steps: int, lr: float) -> list[torch.Tensor]:
    """Flat parameters after 0..steps plain SGD steps (batch 32) on a copy of ``model``.

    Computed here where no GPU is visible; on a GPU machine in a rank of its own: the student's
    worker is forked from this process, and once a process has run a backward pass there, the
    processes it forks cannot run autograd (:func:`hpclab.dist.start_method`)."""
    from hpclab.dist import launch, start_method

    if start_method(_trajectory_entry) == "fork":
        return _trajectory_here(problem, model, steps, lr)
    args = (problem, model, steps, lr)
    return launch(_trajectory_entry, 1, args=args, device="cpu", threads_per_rank=1)[0]


def _trajectory_entry(ctx, problem, model, steps: int, lr: float) -> list[torch.Tensor]:
    return _trajectory_here(problem, model, steps, lr)


def _trajectory_here(problem, model, steps: int, lr: float) -> list[torch.Tensor]:
    import copy

    from hpclab.sgd.hogwild import sgd_step

    model = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    idx = torch.arange(32)
    out = [flat_params(model)]
    for _ in range(steps):
        sgd_step(model, opt, problem, idx)
        out.append(flat_params(model))
    return out


def _two_processes(entry: Callable[..., Any], args: tuple) -> list[Any] | CheckResult:
    """The student's worker on 2 forked processes, 1 thread each; a failed check if it raised."""
    from hpclab.dist import RankError, launch

    try:
        return launch(
            entry, 2, args=args, backend="none", threads_per_rank=1, start_method="fork",
            deadline_s=120,
        )  # fmt: skip
    except RankError as err:
        return failed(f"your worker raised in a process: {error_line(err)}")


def _exact_rule(worker: Callable[..., Any]) -> CheckResult | None:

    problems = [_constant_problem(r) for r in range(2)]
    model = problems[0].model()
    outs = _two_processes(_private_entry, (worker, problems, model, _EXACT_STEPS, _LR))
    if isinstance(outs, CheckResult):
        return outs
    for rank, got in enumerate(outs):
        traj = _sgd_trajectory(problems[rank], model, 4 * _EXACT_STEPS, _LR)

        def same(a: torch.Tensor, b: torch.Tensor) -> bool:
            return bool(torch.allclose(a, b, rtol=1e-5, atol=1e-6))

        if same(got, traj[_EXACT_STEPS]):
            continue
        where = f"on 2 processes with steps={_EXACT_STEPS}, lr={_LR}, process {rank}"
        k = next((k for k, t in enumerate(traj) if same(got, t)), None)
        if k == 0:
            return failed(
                f"{where} left its model unchanged: call optimizer.step() after backward(), "
                "on the `model` you were given"
            )
        if k is not None:
            return failed(
                f"{where} made {k} updates: every process runs all `steps` steps (the total "
                "is workers x steps; that is the point of Hogwild)"
            )
        for factor, why in ((0.5, "halved"), (2.0, "doubled")):
            lr_traj = _sgd_trajectory(problems[rank], model, _EXACT_STEPS, _LR * factor)
            if same(got, lr_traj[-1]):
                return failed(
                    f"{where} stepped as if lr were {_LR * factor:g} ({why}): use lr as given; "
                    "Hogwild does not scale the learning rate by the number of workers"
                )
        return failed(
            f"{where} ended with weights that plain SGD (zero_grad, backward, step with lr) "
            "does not reach in any number of steps: zero the gradients every step, and use "
            "the mean loss of the minibatch (problem.loss_fn) and lr as given"
        )
    return None


@exercise_check
def hogwild_loop(worker: Callable[..., Any]) -> CheckResult:
    """Run ``worker(ctx, problem, model, steps, lr)`` the way Hogwild does.

    First the update rule, exactly: on 2 processes, each with its own copy of a model and a
    problem whose minibatches all have the same gradient, the weights must match plain SGD after
    the same number of steps with the same lr (a quarter of the steps, or lr divided by the
    workers, is named). Then the real thing: 2 forked processes share one model, each must run
    every step (backward passes are counted: no early stop), and the loss must fall about as far
    as the library's own loop makes it fall at the same steps and lr.
    """
    from hpclab.dist import start_method
    from hpclab.sgd.hogwild import prewarm

    if not callable(worker):
        return failed(f"pass your worker function itself, got {type(worker).__name__}")
    problems = _half_problems()
    if start_method(_trajectory_entry) == "fork":  # no GPU here: a backward pass is harmless
        prewarm(problems[0])  # import what the first optimizer imports once, before forking
    exact = _exact_rule(worker)
    if exact is not None:
        return exact
    model = problems[0].model()
    model.share_memory()
    model.bias.register_post_accumulate_grad_hook(_count_backward)
    initial = _mean_loss(problems, model)
    backwards = _two_processes(_entry, (worker, problems, model, _STEPS, _LR))
    if isinstance(backwards, CheckResult):
        return backwards
    for rank, count in enumerate(backwards):
        if 0 < count != _STEPS:
            return failed(
                f"process {rank} ran {count} backward passes for steps={_STEPS}: one per step, "
                "every process runs all of them"
            )
    final = _mean_loss(problems, model)
    reference = _reference_loss(problems)
    if math.isnan(final) or final > reference + 0.25 * (initial - reference):
        return failed(
            f"both processes wrote, but the loss went from {initial:.3f} to {final:.3f} while "
            f"the library's loop at the same {_STEPS} steps and lr reaches {reference:.3f}: "
            "draw a new random minibatch of 32 every step (torch.randint over problem.n_train)"
        )
    return passed(
        f"each process made exactly the SGD updates plain SGD makes ({_EXACT_STEPS} steps, "
        f"lr {_LR:g}); on one shared model, without a lock, the loss fell as far as the "
        "library's own Hogwild loop makes it fall."
    )


def _reference_loss(problems: list) -> float:
    """The mean loss the library's own Hogwild loop reaches on ``problems`` at the same steps
    and lr, on 2 processes sharing one model."""
    import multiprocessing as mp

    from hpclab.dist import launch, start_method
    from hpclab.sgd.hogwild import hogwild_worker

    ref_model = problems[0].model()
    ref_model.share_memory()
    method = start_method(_reference_entry)
    barrier = mp.get_context(method).Barrier(2)
    launch(
        _reference_entry,
        2,
        args=(hogwild_worker, problems, ref_model, barrier),
        backend="none",
        threads_per_rank=1,
        start_method=method,
        deadline_s=120,
    )
    return _mean_loss(problems, ref_model)


def _reference_entry(ctx, hogwild_worker, problems, model, barrier):
    hogwild_worker(ctx, problems[ctx.rank], model, _STEPS, 32, _LR, 0, barrier)
    return True


# --- (b) apply-gradient with version tracking ---------------------------------------------


@exercise_check
def apply_gradient(fn: Callable[..., Any]) -> CheckResult:
    """Replay the scripted interleaving of 3 trainers with ``fn(shard, grad, grad_version)``,
    with two learning rates (a hard-coded lr cannot pass)."""
    from hpclab.sgd.staleness import SCRIPT, SCRIPT_STALENESS, replay_interleaving

    if not callable(fn):
        return failed(f"pass your function itself, got {type(fn).__name__}")
    expected = list(SCRIPT_STALENESS)
    for lr in (0.1, 0.25):
        try:
            shard, reported = replay_interleaving(SCRIPT, fn, lr=lr)
        except Exception as exc:  # noqa: BLE001 - a student's bug becomes feedback
            return failed(f"your function raised {type(exc).__name__}: {exc}")
        if any(r is None for r in reported):
            return failed("return the staleness (an int) of the gradient you applied")
        reported = [int(r) for r in reported]
        if shard.version != len(expected):
            return failed(
                f"after {len(expected)} pushes the version is {shard.version}, expected "
                f"{len(expected)}: advance shard.version by one per applied gradient"
            )
        if reported != expected:
            if reported == [e + 1 for e in expected]:
                return failed(
                    "off by one: compute the staleness before advancing the version "
                    f"(got {reported}, expected {expected})"
                )
            if reported == [-e for e in expected]:
                return failed(
                    "staleness is the shard's version minus the gradient's, not the reverse"
                )
            return failed(f"staleness per push was {reported}; expected {expected}")
        target, _ = replay_interleaving(SCRIPT, lr=lr)  # the library's apply_gradient
        if torch.allclose(shard.params, -target.params):
            return failed("the parameters moved uphill: subtract lr * grad, do not add it")
        if not torch.allclose(shard.params, target.params):
            return failed(
                f"with shard.lr={lr} the staleness is right but the parameters are "
                f"{shard.params.tolist()}, expected {target.params.tolist()}: one SGD step "
                "per push, with the shard's own lr"
            )
    return passed(f"staleness per push {expected} and the final parameters match the script.")
