"""Early stopping in chapter 08's search (issue 28): ASHA and Hyperband stop trials at rungs,
record them as stopped at epoch e, and a promoted trial resumes from its checkpoint."""

from __future__ import annotations

import math

import pytest

from hpclab.config import ConfigError
from hpclab.progress import Progress
from hpclab.search.early_stopping import brackets, ladder, promote, rungs
from hpclab.search.search_experiment import SearchConfig, run_search
from hpclab.trial import run_trial

SMALL = dict(trials=9, epochs=3, samples=200, eta=3, seed=0)
PARAMS = {"lr": 0.1, "momentum": 0.5, "batch_size": 32, "model": "tiny"}


def test_a_resumed_trial_trains_on_as_if_never_stopped(tmp_path):
    straight = run_trial(PARAMS, epochs=3, samples=200)
    ckpt = str(tmp_path / "t.pt")
    first = run_trial(PARAMS, epochs=1, samples=200, checkpoint=ckpt)
    resumed = run_trial(PARAMS, epochs=3, samples=200, checkpoint=ckpt)
    assert first["curve"] == pytest.approx(straight["curve"][:1], abs=1e-6)
    assert resumed["epochs"] == 3 and len(resumed["curve"]) == 3
    assert resumed["curve"] == pytest.approx(straight["curve"], abs=1e-5)
    assert resumed["val_acc"] == pytest.approx(straight["val_acc"], abs=1e-6)


def test_rungs_ladder_and_promotion():
    assert rungs(1, 9, 3) == [1, 3, 9]
    assert rungs(1, 9, 3, bracket=1) == [3, 9] and rungs(1, 9, 3, bracket=2) == [9]
    assert rungs(2, 20, 3) == [2, 6, 18, 20]
    assert brackets("asha", 1, 9, 3) == 1 and brackets("hyperband", 1, 9, 3) == 3
    assert ladder("hyperband", 1, 27, 3) == [1, 3, 9, 27]
    losses = {0: 0.5, 1: math.inf, 2: 0.1, 3: 0.3, 4: 0.2, 5: 0.9, 6: 0.05}
    assert promote(losses, 3) == {6, 2}  # the best 7 // 3 = 2; a diverged trial is last
    assert promote({7: math.inf}, 3) == {7}  # one trial always goes on


def test_early_stopping_needs_two_rungs_and_says_so():
    with pytest.raises(ConfigError, match=r"epochs=2 leaves asha one rung.*allowed: epochs >= 3"):
        SearchConfig.create(strategy="asha", epochs=2)
    with pytest.raises(ConfigError, match="not submitit"):
        SearchConfig.create(strategy="hyperband", backend="submitit", epochs=9)


def test_sequential_asha_stops_trials_at_a_rung_and_samples_randoms_configurations():
    asha = run_search(SearchConfig.create(strategy="asha", **SMALL), Progress()).records
    rand = run_search(SearchConfig.create(strategy="random", **SMALL), Progress()).records
    assert [r["params"] for r in asha] == [r["params"] for r in rand]  # the same 9 configurations
    stopped = [r for r in asha if r["fate"] == "stopped"]
    assert stopped and {r["fate"] for r in asha} <= {"finished", "stopped"}
    assert all(r["epochs"] == 1 and len(r["curve"]) == 1 for r in stopped)  # the only rung: 1
    # finished: all 3 epochs, or diverged (loss inf) earlier
    assert all(
        r["epochs"] == 3 or r["val_loss"] == math.inf for r in asha if r["fate"] == "finished"
    )
    # a trial is stopped only when it is not among the best 1/eta seen at its rung so far
    for r in stopped:
        earlier = [x["curve"][0] for x in asha if x["trial"] < r["trial"]]
        assert sum(v < r["curve"][0] for v in earlier) >= 1
    assert sum(r["epochs"] for r in asha) < sum(r["epochs"] for r in rand) == 27
    # the first epochs agree with random's: the same trial, stopped
    for a, b in zip(asha, rand, strict=True):
        assert a["curve"][0] == pytest.approx(b["curve"][0], abs=1e-6)


def _need_broker():
    from test_search import _need_broker as need

    need()


def test_celery_asha_stops_running_trials_between_epochs():
    _need_broker()
    cfg = SearchConfig.create(backend="celery", strategy="asha", workers=2, **SMALL)
    recs = run_search(cfg, Progress()).records
    assert {r["fate"] for r in recs} <= {"finished", "stopped"}
    stopped = [r for r in recs if r["fate"] == "stopped"]
    assert stopped and all(r["epochs"] < 3 and len(r["curve"]) == r["epochs"] for r in stopped)
    assert len({r["worker"] for r in recs}) == 2


def test_array_rungs_are_synchronous_and_resume_from_checkpoints(cluster):
    cfg = SearchConfig.create(backend="array", strategy="asha", throttle=2, trials=4, epochs=3,
                              samples=200, eta=3)  # fmt: skip
    recs = run_search(cfg, Progress()).records
    finished = [r for r in recs if r["fate"] == "finished"]
    stopped = [r for r in recs if r["fate"] == "stopped"]
    assert len(finished) == 1 and len(stopped) == 3  # the best 4 // 3 = 1 goes on at epoch 1
    assert all(r["epochs"] == 1 for r in stopped) and finished[0]["epochs"] == 3
    best = finished[0]
    assert best["curve"][0] == min(r["curve"][0] for r in recs)  # synchronous: the best of all
    straight = run_trial(best["params"], epochs=3, samples=200)
    assert best["curve"] == pytest.approx(straight["curve"], abs=1e-5)  # resumed, not retrained


def test_the_comparison_has_same_configurations_fewer_epochs_and_a_view_of_stopped_lines():
    from hpclab.search.asha_compare import AshaConfig, asha_table, plot_asha, run_asha

    cfg = AshaConfig.create(trials=6, seeds=1, epochs=3, samples=200)
    res = run_asha(cfg, Progress())
    table = asha_table(res)
    assert table.loc["asha", "epochs"] < table.loc["random", "epochs"] == 18
    assert table.loc["asha", "epochs / random"] < 1
    fig = plot_asha(res)
    lines = [t for t in fig.data if t.xaxis in ("x", None) and t.mode == "lines+markers"]
    asha = sorted((r for r in res.records if r["strategy"] == "asha"), key=lambda r: r["trial"])
    assert [len(t.x) for t in lines] == [r["epochs"] for r in asha]  # each ends where it stopped
    with pytest.raises(ConfigError, match="allowed: epochs >= eta"):
        AshaConfig.create(epochs=2, eta=3)
