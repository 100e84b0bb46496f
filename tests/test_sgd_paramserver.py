"""Chapter 05: the parameter server on gloo ranks: sync == serial, staleness, failures."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest
import torch

from hpclab.config import ConfigError
from hpclab.dist import RankError
from hpclab.progress import Progress
from hpclab.sgd.paramserver import Plan, final_params, initial_params, train_paramserver
from hpclab.sgd.problems import make_problem, serial_sgd
from hpclab.sgd.ps_experiment import (
    ParamServerConfig,
    plot_paramserver,
    run_paramserver,
    summary_table,
)
from hpclab.train import flat_params


@pytest.fixture(scope="module")
def dense():
    return make_problem("dense")


@pytest.fixture(scope="module")
def sparse():
    return make_problem("sparse")


@pytest.mark.parametrize(("mode", "servers"), [("sync", 1), ("sync", 2), ("allreduce", 1)])
def test_synchronous_training_equals_serial_sgd_on_the_combined_batch(dense, mode, servers):
    plan = Plan(dense, mode, servers, 2, 40, 16, 0.1, 0, 0, initial_params(dense))
    outs = train_paramserver(plan)
    serial = serial_sgd(dense, 40, 16, 0.1, streams=2)
    assert torch.allclose(final_params(plan, outs), flat_params(serial), atol=1e-5)
    before = torch.allclose(initial_params(dense), flat_params(serial), atol=1e-3)
    assert not before  # the comparison is not vacuous: training moved the weights
    for o in outs:
        if o["role"] == "server":
            assert o["staleness"] == [0] * 80 and o["version"] == 40


def test_async_is_stale_but_reaches_serial_loss_on_the_convex_problem(sparse):
    cfg = ParamServerConfig.create(model="sparse", mode="async", trainers=2, steps=400)
    res = run_paramserver(cfg, Progress())
    row = summary_table(res).iloc[0]
    serial = sparse.loss(serial_sgd(sparse, 800, 32, 1.0))
    assert row["updates"] == 800
    assert 0 < row["staleness_mean"] <= row["staleness_max"]
    assert abs(row["loss"] - serial) < 0.03
    assert 0 < row["server_busy_fraction"] <= 1
    hist = [r for r in res.records if r["kind"] == "staleness"]
    assert sum(h["count"] for h in hist) == 800
    fig = plot_paramserver(res)  # 2 loss panels + histogram + 3 scaling panels
    assert len(fig.data) == 6


def test_ssp_bound_zero_limits_staleness(dense):
    res = run_paramserver(
        ParamServerConfig.create(mode="ssp", bound=0, trainers=2, steps=60), Progress()
    )
    row = summary_table(res).iloc[0]
    assert row["staleness_max"] <= 1  # lock-step: at most the other trainer's one push


def test_a_dying_trainer_ends_the_run_fast_and_leaves_no_process():
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    cfg = ParamServerConfig.create(mode="async", trainers=2, steps=200, fail_step=5)
    with pytest.raises(RankError) as err:
        run_paramserver(cfg, Progress())
    assert err.value.rank == 1  # rank 0 is the server, rank 1 the first trainer
    assert "fails at step 5" in str(err.value)
    time.sleep(0.2)
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


def test_bad_input_is_refused():
    with pytest.raises(ConfigError, match="trainers \\+ servers"):
        ParamServerConfig.create(trainers=30, servers=8)
    with pytest.raises(ConfigError, match="bound=-1"):
        ParamServerConfig.create(mode="ssp", bound=-1)
    with pytest.raises(ConfigError, match="fail_step=9"):
        ParamServerConfig.create(steps=5, fail_step=9)


def test_cli_json_and_one_line_errors():
    cmd = [sys.executable, "-m", "hpclab.cli", "run", "paramserver"]
    out = subprocess.run(
        [*cmd, "--trainers", "2", "--mode", "sync", "--steps", "5", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    import json

    data = json.loads(out.stdout)
    summary = data["records"][0]
    for key in ("updates_per_s", "staleness_mean", "staleness_max", "server_busy_fraction"):
        assert key in summary
    assert summary["staleness_max"] == 0
    bad = subprocess.run([*cmd, "--lr", "-1"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "lr=-1.0" in bad.stderr
