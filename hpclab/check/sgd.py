"""Checks for chapter 05's exercises: the Hogwild worker loop, the server's apply-gradient with
version tracking, and the stale-synchronous (bounded staleness) rule."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from hpclab.check import CheckResult, failed, passed

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
                lambda: SparseLogReg(_FEATURES),
                torch.nn.functional.binary_cross_entropy_with_logits,
                binary=True,
            )
        )
    return halves


def _entry(ctx, fn, problems, model, steps, lr):
    fn(ctx, problems[ctx.rank], model, steps, lr)
    return True


def _mean_loss(problems, model) -> float:
    return sum(p.loss(model) for p in problems) / len(problems)


def hogwild_loop(worker: Callable[..., Any]) -> CheckResult:
    """Run ``worker(ctx, problem, model, steps, lr)`` on 2 forked processes sharing ``model``.

    Passes when both processes' updates land in the shared weights and the loss falls about as
    far as the library's loop makes it fall.
    """
    from hpclab.dist import RankError, launch
    from hpclab.sgd.hogwild import hogwild_worker, prewarm

    if not callable(worker):
        return failed(f"pass your worker function itself, got {type(worker).__name__}")
    problems = _half_problems()
    prewarm(problems[0])  # import what the first optimizer imports once, before forking
    model = problems[0].model()
    model.share_memory()
    start = model.weight.weight.detach().clone().squeeze(1)
    initial = _mean_loss(problems, model)
    try:
        launch(
            _entry,
            2,
            args=(worker, problems, model, _STEPS, _LR),
            backend="none",
            threads_per_rank=1,
            start_method="fork",
            deadline_s=120,
        )
    except RankError as err:
        return failed(f"process {err.rank} raised {err.summary}; fix it and run again")
    moved = (model.weight.weight.detach().squeeze(1) - start).abs()
    half = _FEATURES // 2
    changed = [bool((moved[:half] > 0).any()), bool((moved[half:] > 0).any())]
    if not any(changed):
        return failed(
            "the shared model did not change at all: train the `model` you were given (not a "
            "copy or a new model), and call optimizer.step() after backward()"
        )
    if not all(changed):
        who = changed.index(True)
        return failed(
            f"only process {who}'s updates reached the shared weights: every process must "
            "train the shared model (no `if ctx.rank == 0:` around the loop)"
        )
    final = _mean_loss(problems, model)
    # The library's own loop on the same problems, for the loss this run should reach.
    ref_model = problems[0].model()
    ref_model.share_memory()
    import multiprocessing as mp

    barrier = mp.get_context("fork").Barrier(2)
    launch(
        _reference_entry,
        2,
        args=(hogwild_worker, problems, ref_model, barrier),
        backend="none",
        threads_per_rank=1,
        start_method="fork",
        deadline_s=120,
    )
    reference = _mean_loss(problems, ref_model)
    if math.isnan(final) or final > reference + 0.5 * (initial - reference):
        return failed(
            f"both processes wrote, but the loss went from {initial:.3f} to {final:.3f} while "
            f"{_STEPS} steps should reach about {reference:.3f}: zero the gradients every step "
            "(optimizer.zero_grad()), use lr as given, and sample a new minibatch each step"
        )
    return passed(
        "both processes wrote into the shared weights without a lock, and the loss fell "
        "about as far as the library's own Hogwild loop makes it fall."
    )


def _reference_entry(ctx, hogwild_worker, problems, model, barrier):
    hogwild_worker(ctx, problems[ctx.rank], model, _STEPS, 32, _LR, 0, barrier)
    return True


# --- (b) apply-gradient with version tracking ---------------------------------------------


def apply_gradient(fn: Callable[..., Any]) -> CheckResult:
    """Replay the scripted interleaving of 3 trainers with ``fn(shard, grad, grad_version)``."""
    from hpclab.sgd.staleness import SCRIPT, SCRIPT_STALENESS, replay_interleaving

    if not callable(fn):
        return failed(f"pass your function itself, got {type(fn).__name__}")
    try:
        shard, reported = replay_interleaving(SCRIPT, fn, lr=0.1)
    except Exception as exc:  # noqa: BLE001 - a student's bug becomes feedback, not a traceback
        return failed(f"your function raised {type(exc).__name__}: {exc}")
    expected = list(SCRIPT_STALENESS)
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
            return failed("staleness is the shard's version minus the gradient's, not the reverse")
        return failed(f"staleness per push was {reported}; expected {expected}")
    target = torch.full_like(shard.params, -0.1 * 2 * (1 + 2 + 3))
    if torch.allclose(shard.params, -target):
        return failed("the parameters moved uphill: subtract lr * grad, do not add it")
    if not torch.allclose(shard.params, target):
        return failed(
            f"the staleness is right but the parameters are {shard.params.tolist()}, expected "
            f"{target.tolist()}: apply params -= shard.lr * grad"
        )
    return passed(f"staleness per push {reported} and the final parameters match the script.")


# --- (c) the bounded-staleness (SSP) rule -------------------------------------------------

_CASES: tuple[tuple[tuple[int, ...], int, int, bool], ...] = (
    ((3, 1), 0, 2, True),
    ((4, 1), 0, 2, False),
    ((1, 4), 0, 0, True),
    ((2, 2), 1, 0, True),
    ((2, 1, 5), 2, 3, False),
    ((2, 1, 4), 2, 3, True),
    ((6, 6, 6), 0, 0, True),
    ((0, 0, 0), 1, 0, True),
    ((2, 0), 0, 2, True),
    ((5, 1), 0, 2, False),
)


# Plausible wrong rules, recognised by their answers on all cases, with the advice for each.
_MISTAKES: tuple[tuple[Callable[[list[int], int, int], bool], str], ...] = (
    (
        lambda c, t, b: c[t] - min(c) < b,
        "a trainer exactly `bound` pushes ahead must still be allowed (use <=, not <); with "
        "bound=0 your rule would block everyone forever",
    ),
    (
        lambda c, t, b: c[t] <= b,
        "compare the trainer's lead over the slowest trainer with the bound, not its own clock",
    ),
    (
        lambda c, t, b: True,
        "your rule never blocks anyone (plain async, not SSP): measure the trainer's lead over "
        "the slowest trainer (min of the clocks), not over the fastest",
    ),
)


def ssp_rule(allows: Callable[[list[int], int, int], Any]) -> CheckResult:
    """``allows(clocks, trainer, bound)`` on scripted cases and a scripted schedule."""
    from hpclab.sgd.staleness import simulate_ssp

    if not callable(allows):
        return failed(f"pass your function itself, got {type(allows).__name__}")
    answers = []
    for clocks, trainer, bound, _ in _CASES:
        try:
            answers.append(bool(allows(list(clocks), trainer, bound)))
        except Exception as exc:  # noqa: BLE001
            return failed(f"allows({list(clocks)}, {trainer}, {bound}) raised {exc!r}")
    wanted = [want for *_, want in _CASES]
    if answers != wanted:
        for rule, advice in _MISTAKES:
            if answers == [rule(list(c), t, b) for c, t, b, _ in _CASES]:
                return failed(advice)
        k = next(i for i, (a, w) in enumerate(zip(answers, wanted, strict=True)) if a != w)
        clocks, trainer, bound, want = _CASES[k]
        return failed(
            f"allows({list(clocks)}, trainer={trainer}, bound={bound}) returned {answers[k]}, "
            f"expected {want}: a trainer may go on while clocks[trainer] - min(clocks) <= bound"
        )
    attempts = [0, 0, 0, 0, 1, 2, 1, 2, 1, 2]
    order, waiting = simulate_ssp(attempts, 3, 1, lambda c, t, b: bool(allows(c, t, b)))
    from hpclab.sgd.staleness import ssp_allows

    want_order, want_waiting = simulate_ssp(attempts, 3, 1, ssp_allows)
    if (order, waiting) != (want_order, want_waiting):
        return failed(f"on the scripted schedule your rule pushes {order}, expected {want_order}")
    return passed(
        f"all {len(_CASES)} cases and the scripted schedule agree (bound=1 order {order})."
    )
