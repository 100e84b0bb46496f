"""Chapter 05: Hogwild! (lock-free) and locked shared-memory SGD against serial SGD."""

from __future__ import annotations

import pytest

from hpclab.config import ConfigError
from hpclab.progress import Progress
from hpclab.sgd.hogwild import DEFAULT_LR, overlap_model, train_hogwild
from hpclab.sgd.hogwild_experiment import HogwildConfig, plot_hogwild, run_hogwild, speedup_table
from hpclab.sgd.problems import make_problem, serial_sgd


@pytest.fixture(scope="module")
def sparse():
    return make_problem("sparse")


def test_hogwild_reaches_serial_sgd_on_the_convex_problem(sparse):
    initial = sparse.loss(sparse.model())
    serial = sparse.loss(serial_sgd(sparse, 1000, 32, DEFAULT_LR["sparse"]))
    model, outs = train_hogwild(sparse, 2, 1000, 32, DEFAULT_LR["sparse"])
    hogwild = sparse.loss(model)
    assert [o["steps"] for o in outs] == [500, 500]
    assert initial - serial > 0.1  # the run learns something worth comparing
    assert abs(hogwild - serial) < 0.02


def test_locked_and_lock_free_agree(sparse):
    lockfree, _ = train_hogwild(sparse, 2, 1200, 32, DEFAULT_LR["sparse"])
    locked, _ = train_hogwild(sparse, 2, 1200, 32, DEFAULT_LR["sparse"], locked=True)
    assert abs(sparse.loss(lockfree) - sparse.loss(locked)) < 0.02


def test_dense_model_keeps_serial_accuracy():
    res = run_hogwild(HogwildConfig.create(model="dense", workers=2, updates=1500), Progress())
    table = speedup_table(res).set_index("variant")
    assert list(table.index) == ["serial", "hogwild"]
    assert table.loc["serial", "speedup_vs_serial"] == 1.0
    assert table.loc["hogwild", "accuracy"] >= table.loc["serial", "accuracy"] - 0.03
    assert table.loc["hogwild", "accuracy"] > 0.85
    for col in ("wall_s", "updates_per_s", "accuracy", "speedup_vs_serial"):
        assert table.loc["hogwild", col] > 0
    curves = [r for r in res.records if r["kind"] == "curve" and r["variant"] == "hogwild"]
    assert curves[-1]["update"] == 1500  # the merged curve counts every worker's updates
    assert curves[-1]["loss_smoothed"] < curves[0]["loss_smoothed"]
    fig = plot_hogwild(res + res)  # accumulated runs: 2 runs x 2 variants x 2 panels
    assert len(fig.data) == 8 and fig.data[0].x[-1] > 0


def test_overlap_model():
    assert overlap_model("dense", 2, 32, 10, 0) == 1.0
    assert overlap_model("sparse", 1, 32, 10, 2000) == 0.0
    # 320 weights written per update of 2000: 1 - (1 - 1/2000)^320 for one other worker.
    assert overlap_model("sparse", 2, 32, 10, 2000) == pytest.approx(0.1479, abs=1e-3)
    assert overlap_model("sparse", 2, 1, 1, 10**6) < 1e-5


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"lr": -0.1}, ["lr=-0.1", "0.0..10.0"]),
        ({"workers": 0}, ["workers=0", "1..64"]),
        ({"workers": 40, "threads": 4}, ["workers x threads", "usable cores"]),
        ({"model": "huge"}, ["model='huge'", "dense"]),
    ],
)
def test_bad_input_is_refused_in_one_line(params, words):
    with pytest.raises(ConfigError) as err:
        HogwildConfig.create(**params)
    text = str(err.value)
    assert "\n" not in text
    for w in words:
        assert w in text


def test_overlap_table_follows_the_formula():
    from hpclab.sgd.hogwild import overlap_table

    table = overlap_table((("dense", 2, 32, 0), ("sparse", 2, 32, 10), ("sparse", 1, 32, 10)), 2000)
    assert table["overlap"].tolist() == [1.0, round(1 - (1 - 1 / 2000) ** 320, 3), 0.0]


def test_train_step_holds_the_lock_around_the_update_only(sparse):
    """The locked variant: ``hpclab.train.train_step(lock=...)`` writes the weights inside the
    lock, and computes the gradient outside it (else the lock would serialise everything)."""
    import torch

    from hpclab.train import flat_params, train_step

    model = sparse.model()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    seen = []

    class Spy:
        def __enter__(self):
            seen.append(("enter", flat_params(model), model.bias.grad is not None))

        def __exit__(self, *exc):
            seen.append(("exit", flat_params(model), None))

    idx = torch.arange(32)
    train_step(model, opt, sparse.x_train[idx], sparse.y_train[idx], sparse.loss_fn, lock=Spy())
    (_, before, has_grad), (_, after, _) = seen
    assert has_grad  # backward ran before the lock was taken
    assert torch.equal(before, torch.zeros_like(before))  # weights untouched until then
    assert not torch.equal(after, before)  # the update happened inside
