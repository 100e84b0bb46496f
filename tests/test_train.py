"""hpclab.train: one model registry and one flat-parameter helper for every chapter."""

from __future__ import annotations

import pytest
import torch

from hpclab import experiments
from hpclab.sgd.problems import SparseLogReg
from hpclab.train import (
    MLP_MODELS,
    MODELS,
    flat_grad,
    flat_params,
    make_model,
    parameter_count,
    set_flat_params,
)


@pytest.mark.parametrize("name", MODELS)
def test_every_model_builds_from_one_seed_and_trains_on_flat_features(name):
    a, b = make_model(name, 64, seed=3), make_model(name, 64, seed=3)
    assert torch.equal(flat_params(a), flat_params(b))  # same seed, same initial weights
    assert not torch.equal(flat_params(a), flat_params(make_model(name, 64, seed=4)))
    assert a(torch.rand(5, 64)).shape == (5, 10)


def test_model_sizes_teach_what_they_claim():
    tiny, large = (
        parameter_count(make_model("tiny", 784)),
        parameter_count(make_model("large", 784)),
    )
    assert large >= 10 * tiny
    deep = make_model("deep", 784)
    linears = [m for m in deep if isinstance(m, torch.nn.Linear)]
    assert len(linears) == 24 and len(list(deep.parameters())) == 48  # many small tensors
    with pytest.raises(ValueError, match="allowed: tiny, large, deep, cnn"):
        make_model("resnet", 64)
    with pytest.raises(ValueError, match="in_features=3072 is not a square"):
        make_model("cnn", 3072)


def test_every_experiment_offers_models_from_the_one_registry():
    """The model choices of chapters 01, 04 and 06 come from hpclab.train.MODELS."""
    seen = {}
    for name in ("train-throughput", "data-wait", "ddp", "ddp-buckets"):
        field = experiments.get(name).config.__dataclass_fields__["model"]
        seen[name] = set(field.metadata["choices"])
    assert all(choices <= set(MODELS) for choices in seen.values())
    assert seen["data-wait"] == set(MLP_MODELS)  # its images are not square single-channel
    assert seen["ddp"] == seen["ddp-buckets"] == set(MODELS)


def test_flat_params_round_trip_and_look_through_ddp_wrappers():
    model = make_model("tiny", 64, seed=1)
    flat = flat_params(model)
    assert flat.shape == (parameter_count(model),)
    target = make_model("tiny", 64, seed=2)
    set_flat_params(target, flat)
    assert torch.equal(flat_params(target), flat)
    flat[0] += 1.0  # a copy: writing it leaves the model alone
    assert not torch.equal(flat_params(model), flat)

    class Wrapper(torch.nn.Module):  # the shape of DDP: the replica is ``.module``
        def __init__(self, module):
            super().__init__()
            self.module = module

    assert torch.equal(flat_params(Wrapper(target)), flat_params(target))


def test_flat_grad_densifies_sparse_gradients():
    model = SparseLogReg(6)
    loss = model(torch.tensor([[1, 4]])).sum()
    loss.backward()
    assert model.weight.weight.grad.is_sparse
    grad = flat_grad(model)
    # parameters() yields the module's own bias first, then the embedding rows (1 and 4 touched)
    assert grad.tolist() == [1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0]
