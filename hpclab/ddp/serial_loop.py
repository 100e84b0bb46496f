"""The single-process loop that chapter 06's exercise (a) turns into DDP, and its data.

:func:`train_serial` is written the way :class:`torch.utils.data.DistributedSampler` orders
data: every epoch is ``torch.randperm(len(data))`` seeded with ``seed + epoch``. A DDP version
with ``n`` ranks, a ``DistributedSampler`` (which deals every n-th index of that permutation to
each rank), ``set_epoch`` and a per-rank batch ``b`` must end where this loop ends with batch
``n * b``: that is what ``hpclab.check.ddp.ddp_training`` compares.
"""

from __future__ import annotations

import torch

from hpclab.train import TrainSpec, flat_params, make_model, synthetic_images, train_step

SAMPLES = 512  # 8x8 images, flattened to 64 features
FEATURES = 64
LR = 0.1
STEPS = 24  # crosses into a second epoch at global batch 32 (16 steps per epoch)
PER_RANK_BATCH = 16
SEED = 0


def exercise_data(seed: int = SEED) -> torch.utils.data.TensorDataset:
    """512 MNIST-like 8x8 images (flattened, ``[512, 64]``) and labels ``[512]``."""
    x, y = synthetic_images(SAMPLES, (1, 8, 8), seed=seed)
    return torch.utils.data.TensorDataset(x.reshape(SAMPLES, FEATURES), y)


def exercise_spec() -> TrainSpec:
    """The exercise as a spec: what :func:`hpclab.train.run_spec` hands the check's ranks."""
    return TrainSpec(
        model="tiny", side=8, per_rank_batch=PER_RANK_BATCH, steps=STEPS, lr=LR, seed=SEED,
        samples=SAMPLES,
    )  # fmt: skip


def exercise_model(seed: int = SEED) -> torch.nn.Module:
    return make_model("tiny", FEATURES, seed=seed)


def train_serial(steps: int, batch: int, seed: int = SEED, reshuffle: bool = True) -> torch.Tensor:
    """One process, one model: ``steps`` SGD steps of ``batch`` samples; returns the flat
    parameters. ``reshuffle=False`` repeats epoch 0's order (what forgetting ``set_epoch``
    does to a DistributedSampler)."""
    data = exercise_data(seed)
    model = exercise_model(seed)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x_all, y_all = data.tensors
    done, epoch = 0, 0
    while done < steps:
        gen = torch.Generator().manual_seed(seed + (epoch if reshuffle else 0))
        order = torch.randperm(len(data), generator=gen)
        for i in range(len(data) // batch):
            if done == steps:
                break
            idx = order[i * batch : (i + 1) * batch]
            train_step(model, opt, x_all[idx], y_all[idx])
            done += 1
        epoch += 1
    return flat_params(model)
