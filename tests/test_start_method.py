"""How ranks start (chapter 05): fork where no GPU is visible, forkserver where one is, and a
worker the rank cannot import named as the cause. GPU visibility is monkeypatched: the choice
is made without a GPU, and the forkserver runs are real."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch

import hpclab.dist.placement as placement
from hpclab.dist import LaunchError, RankError, launch, start_method
from hpclab.sgd.hogwild import DEFAULT_LR, train_hogwild
from hpclab.sgd.paramserver import Plan, final_params, initial_params, train_paramserver
from hpclab.sgd.problems import make_problem, serial_sgd
from hpclab.train import flat_params


def _importable(ctx):
    return ctx.rank


def _notebook_worker(ctx):
    return ctx.rank


_notebook_worker.__module__ = "__main__"


@pytest.fixture
def gpus(monkeypatch):
    def set_count(n: int) -> None:
        monkeypatch.setattr(placement, "gpu_count", lambda: n)

    return set_count


def test_fork_without_gpu_forkserver_with_one(gpus):
    gpus(0)
    assert start_method(_importable) == "fork"
    assert start_method(_notebook_worker) == "fork"
    gpus(1)
    assert start_method(_importable) == "forkserver"
    assert start_method(_notebook_worker) == "fork"  # the only way it can run at all
    assert start_method(_importable, "spawn") == "spawn"


def test_after_cuda_init_fork_is_refused_and_auto_avoids_it(gpus, monkeypatch):
    gpus(1)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert start_method(_importable) == "forkserver"
    with pytest.raises(LaunchError, match="CUDA is already initialised"):
        start_method(_importable, "fork")
    with pytest.raises(LaunchError, match="forkserver cannot import it"):
        start_method(_notebook_worker)


def test_hogwild_and_parameter_server_run_under_forkserver(gpus):
    """What a GPU node gets: the same training, started by forkserver (pickled, not forked)."""
    gpus(1)
    sparse = make_problem("sparse")
    serial = sparse.loss(serial_sgd(sparse, 400, 32, DEFAULT_LR["sparse"]))
    model, outs = train_hogwild(sparse, 2, 400, 32, DEFAULT_LR["sparse"])
    assert [o["steps"] for o in outs] == [200, 200]
    assert sparse.loss(model) < sparse.loss(sparse.model()) - 0.05  # shared weights trained
    assert abs(sparse.loss(model) - serial) < 0.03
    dense = make_problem("dense")
    plan = Plan(dense, "sync", 1, 2, 10, 16, 0.1, 0, 0, initial_params(dense))
    got = final_params(plan, train_paramserver(plan))
    assert torch.allclose(got, flat_params(serial_sgd(dense, 10, 16, 0.1, streams=2)), atol=1e-5)


def test_a_worker_the_rank_cannot_import_is_named(tmp_path, monkeypatch):
    path = tmp_path / "hpclab_unimportable_worker.py"
    path.write_text("def work(ctx):\n    return 1\n")
    spec = importlib.util.spec_from_file_location("hpclab_unimportable_worker", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # importable here, not on the child's sys.path
    monkeypatch.setitem(sys.modules, "hpclab_unimportable_worker", module)
    with pytest.raises(RankError) as info:
        launch(module.work, 1, start_method="spawn", deadline_s=120)
    first = str(info.value).splitlines()[0]
    assert "No module named 'hpclab_unimportable_worker'" in first
    assert "can only join" not in str(info.value)


def test_a_worker_that_cannot_be_pickled_is_named():
    def local(ctx):  # a closure: spawn cannot pickle it
        return 1

    with pytest.raises(LaunchError, match=r"rank 0 could not be started with spawn: .*local"):
        launch(local, 1, start_method="spawn")
