"""Chapter 08's serving experiment: Celery workers answer what the model answers, keep the model
loaded, cost more per call than a direct call, and batching amortises that cost."""

from __future__ import annotations

import os
import tempfile

import pytest
from test_search import _leftovers, _need_broker

from hpclab import experiments
from hpclab.config import ConfigError
from hpclab.progress import Progress
from hpclab.search.serve import MODEL_ENV, ServeConfig, _environ, predict, run_serve
from hpclab.search.serve_plot import plot_serve, serve_table
from hpclab.trial import run_trial


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One quick run (batches 1, 4, 16) shared by the tests below; its temporary files (the
    saved model) are gone after it."""
    _need_broker()
    tmp = tmp_path_factory.mktemp("serve")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tempfile, "tempdir", str(tmp))
        result = run_serve(ServeConfig.create(batches=(1, 4, 16), requests=64), Progress())
    assert not list(tmp.glob("hpclab-serve-*"))
    return result


def test_celery_serves_exactly_the_direct_models_predictions(served):
    recs = served.records
    assert {(r["mode"], r["batch"]) for r in recs} == {
        (m, b) for m in ("direct", "celery") for b in (1, 4, 16)
    }
    # Every burst's classes, through Redis and the workers, equal the in-process model's.
    assert all(r["mismatches"] == 0 for r in recs)
    assert all(r["tasks"] == -(-64 // r["batch"]) for r in recs)
    assert recs[0]["served_acc"] > 0.5  # a trained model, not a random one (10 classes)
    assert _leftovers() == []


def test_a_round_trip_through_the_broker_costs_more_than_a_direct_call(served):
    by = {(r["mode"], r["batch"]): r for r in served.records}
    for b in (1, 4, 16):
        direct, celery = by["direct", b], by["celery", b]
        # A Celery call crossed two processes and Redis (it has a broker time); a direct one
        # did not. How much slower it is belongs to benchmarks/serve.py.
        assert celery["broker_ms"] > 0 and direct["broker_ms"] == 0
        assert celery["latency_ms_min"] <= celery["latency_ms"] <= celery["latency_ms_max"]
    # 16 requests per task pay the broker once instead of 16 times (the tasks' count is checked
    # above; the requests/s it buys is measured in benchmarks/serve.py)


def test_the_plot_and_table_show_both_modes_and_the_broker(served):
    table = serve_table(served)
    differing = table["predictions differing"]
    assert len(table) == 6 and (differing.loc["celery"] == 0).all()
    assert (differing.loc["direct"] == "").all()  # nothing to compare a direct call with
    fig = plot_serve(served)
    names = {t.name for t in fig.data}
    assert {"direct call in this process", "Celery, 2 workers", "broker alone (echo task)"} <= names
    assert fig.layout.xaxis.type == "log" and list(fig.layout.xaxis.tickvals) == [1, 4, 16]


def test_workers_load_the_model_at_start_not_per_request(tmp_path):
    """The model file is gone before the first request: a warm worker still answers."""
    _need_broker()
    from hpclab.search.broker import celery_pool
    from hpclab.search.tasks import app_for

    path = str(tmp_path / "model.pt")
    run_trial({"model": "tiny"}, epochs=1, samples=64, save_to=path)
    rows = [[i / 64] * 64 for i in range(3)]
    expected = predict(rows, path)
    with _environ(MODEL_ENV, path), celery_pool(1) as (url, _):
        os.remove(path)
        got = app_for(url).send_task("hpclab.predict", args=[rows, path]).get(timeout=60)
    assert got == expected
    assert _leftovers() == []


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ({"batches": (0, 4)}, "batches=0 is out of range"),
        ({"requests": 0}, "requests=0 is out of range"),
        ({"requests": 8, "batches": (1, 16)}, "requests=8 is fewer than the largest batch 16"),
        ({"batches": ()}, "batches is empty"),
    ],
)
def test_bad_input_is_one_line(args, words):
    with pytest.raises(ConfigError, match=words) as err:
        experiments.run("serve", **args)
    assert "\n" not in str(err.value)


def test_a_missing_broker_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    """The CLI prints a RunError's line and exits 1 (test_search checks that path)."""
    from hpclab.search.broker import BrokerError

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("HPCLAB_REDIS_SERVER", str(tmp_path / "no-redis-server"))
    with pytest.raises(BrokerError, match="redis-server not found") as err:
        experiments.run("serve", batches=(1,), requests=2)
    assert "\n" not in str(err.value) and "HPCLAB_REDIS_SERVER" in str(err.value)
    assert _leftovers() == [] and not list(tmp_path.iterdir())
