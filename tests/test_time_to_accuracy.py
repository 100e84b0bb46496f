"""Chapter 06's time to accuracy in the engine: the teacher task and its validation split,
training to a target (one rank == two ranks), the learning-rate rules, LARS and LAMB against
their papers' update rules, and the gradient noise scale's estimator."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from hpclab.dist import RankContext
from hpclab.train import TrainSpec, run_spec, target_worker, train_to_target
from hpclab.train.data import LABEL_NOISE, TEACHER_FEATURES, load, teacher_task
from hpclab.train.layerwise import LAMB, LARS
from hpclab.train.noise import norm_estimates
from hpclab.train.optim import lr_factor, scaled_lr

ONE = RankContext(rank=0, world_size=1, backend="none", device="cpu", threads=1)
# 4096 teacher samples, 1024 held out; 2 x 32 per step on two ranks = 64 steps per epoch.
SPEC = TrainSpec(
    data="teacher", samples=4096, val_samples=1024, per_rank_batch=32, steps=300, lr=0.3,
    target_acc=0.6, val_every=8,
)  # fmt: skip


def test_the_teacher_task_is_large_deterministic_and_its_split_held_out():
    (x, y), (xv, yv) = load("teacher", 100_000, 10_000, 28, 0)
    assert x.shape == (100_000, TEACHER_FEATURES) and xv.shape == (10_000, TEACHER_FEATURES)
    x2, y2 = teacher_task(110_000, seed=0)
    assert torch.equal(x2[:100_000], x) and torch.equal(y2[100_000:], yv)  # same seed, same data
    assert not torch.equal(teacher_task(100, seed=1)[0], teacher_task(100, seed=0)[0])
    # The noise: a tenth of the labels redrawn, so they disagree with the clean teacher's.
    clean = teacher_task(20_000, noise=0.0, seed=3)[1]
    noisy = teacher_task(20_000, seed=3)[1]
    assert (clean != noisy).float().mean() == pytest.approx(LABEL_NOISE * 0.9, abs=0.01)
    assert torch.bincount(y, minlength=10).min() > 2000  # every class present


def test_bad_targets_and_warmups_are_one_line():
    with pytest.raises(ValueError, match=r"target_acc=1.5; allowed: a validation accuracy in"):
        replace(SPEC, target_acc=1.5)
    with pytest.raises(ValueError, match="needs a validation split: val_samples >= 1"):
        replace(SPEC, val_samples=0)
    with pytest.raises(ValueError, match=r"lr_warmup=500 steps is longer than the run \(303"):
        replace(SPEC, schedule="warmup-constant", lr_warmup=500)
    with pytest.raises(ValueError, match="data='mnist' is not known; allowed: synthetic, digits"):
        replace(SPEC, data="mnist")


def test_two_ranks_reach_the_target_at_the_step_one_rank_with_the_global_batch_does():
    two = run_spec(SPEC, 2, worker=target_worker, device="cpu", threads=1)
    one = train_to_target(ONE, replace(SPEC, per_rank_batch=64))
    assert two[0]["reached"] and one["reached"]
    assert two[0]["steps_to_target"] == two[1]["steps_to_target"] == one["steps_to_target"]
    assert two[0]["curve"][0]["val_acc"] == pytest.approx(one["curve"][0]["val_acc"], abs=2e-3)
    assert two[0]["params_max_diff"] == 0.0
    assert one["epochs_to_target"] == one["steps_to_target"] / 64
    assert 0 < one["time_to_target_s"] <= one["train_s"]


def test_a_run_that_never_reaches_its_target_says_so():
    out = train_to_target(ONE, replace(SPEC, target_acc=0.999, steps=40))
    assert not out["reached"] and out["steps_to_target"] is None
    assert out["time_to_target_s"] is None and out["curve"][-1]["step"] == 40
    assert out["val_acc_last"] < 0.999


def test_learning_rate_rules_and_the_constant_warmup():
    assert scaled_lr("none", 0.1, 32, 512) == 0.1
    assert scaled_lr("linear", 0.1, 32, 512) == pytest.approx(1.6)
    assert scaled_lr("sqrt", 0.1, 32, 512) == pytest.approx(0.4)
    with pytest.raises(ValueError, match="rule='cubic' is not known; allowed: none, linear"):
        scaled_lr("cubic", 0.1, 32, 512)
    got = [lr_factor("warmup-constant", k, 10, 4) for k in range(8)]
    assert got == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0]


def _params(seed: int = 0) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(3, 4, generator=g)), torch.nn.Parameter(torch.zeros(4))]


def _grads(step: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(3, 4, generator=g), torch.randn(4, generator=g)]


def _run(opt_cls, steps: int, **kw) -> list[torch.Tensor]:
    ps = _params()
    opt = opt_cls(ps, **kw)
    for t in range(steps):
        for p, g in zip(ps, _grads(t), strict=True):
            p.grad = g.clone()
        opt.step()
    return [p.detach() for p in ps]


def test_lars_follows_you_gitman_ginsburg_2017():
    gamma, m, beta, eta = 0.5, 0.9, 1e-3, 0.001
    ws = [p.detach().clone() for p in _params()]
    vs = [torch.zeros_like(w) for w in ws]
    for t in range(3):
        for i, g in enumerate(_grads(t)):
            w = ws[i]
            wn, gn = w.norm().item(), g.norm().item()
            local = eta * wn / (gn + beta * wn) if wn > 0 and gn > 0 else 1.0  # eq. 6
            vs[i] = m * vs[i] + gamma * local * (g + beta * w)  # eq. 7
            ws[i] = w - vs[i]
    got = _run(LARS, 3, lr=gamma, momentum=m, weight_decay=beta, eta=eta)
    for a, b in zip(got, ws, strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    assert not torch.allclose(got[0], _params()[0])  # it moved


def test_lamb_follows_you_et_al_2020_algorithm_2():
    lr, b1, b2, eps, lam = 0.01, 0.9, 0.999, 1e-6, 0.01
    ws = [p.detach().clone() for p in _params()]
    ms = [torch.zeros_like(w) for w in ws]
    vs = [torch.zeros_like(w) for w in ws]
    for t in range(1, 4):
        for i, g in enumerate(_grads(t - 1)):
            ms[i] = b1 * ms[i] + (1 - b1) * g
            vs[i] = b2 * vs[i] + (1 - b2) * g * g
            r = (ms[i] / (1 - b1**t)) / ((vs[i] / (1 - b2**t)).sqrt() + eps)
            u = r + lam * ws[i]
            wn, un = ws[i].norm().item(), u.norm().item()
            trust = wn / un if wn > 0 and un > 0 else 1.0  # phi = identity
            ws[i] = ws[i] - lr * trust * u
    got = _run(LAMB, 3, lr=lr, betas=(b1, b2), eps=eps, weight_decay=lam)
    for a, b in zip(got, ws, strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    # the trust ratio at work: the first step of the weight matrix is lr x ||w|| long
    one = _run(LAMB, 1, lr=lr, betas=(b1, b2), eps=eps, weight_decay=0.0)[0]
    w0 = _params()[0].detach()
    assert (one - w0).norm().item() == pytest.approx(lr * w0.norm().item(), rel=1e-4)


def test_lars_and_lamb_refuse_bad_settings_naming_each_and_what_is_allowed():
    with pytest.raises(ValueError, match=r"^LARS: lr=0.1, momentum=1.0, weight_decay=0.0, eta="):
        LARS(_params(), lr=0.1, momentum=1.0)
    with pytest.raises(ValueError, match=r"^LAMB: lr=-1.*; allowed: lr > 0, 0 <= betas < 1"):
        LAMB(_params(), lr=-1)


def test_the_noise_scale_estimator_recovers_a_known_variance():
    # Per-sample gradients G + noise of variance sigma^2 per coordinate: tr(Sigma) = d sigma^2.
    d, sigma, b, big = 50, 2.0, 8, 64
    g_true = torch.full((d,), 0.5)
    gen = torch.Generator().manual_seed(0)
    g2s, ss = [], []
    for _ in range(400):
        samples = g_true + sigma * torch.randn(big, d, generator=gen)
        small = samples.view(big // b, b, d).mean(dim=1).square().sum(dim=1).mean()
        g2, s = norm_estimates(float(small), float(samples.mean(0).square().sum()), b, big)
        g2s.append(g2)
        ss.append(s)
    b_simple = (sum(ss) / len(ss)) / (sum(g2s) / len(g2s))
    assert b_simple == pytest.approx(d * sigma**2 / float(g_true.square().sum()), rel=0.1)
