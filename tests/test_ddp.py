"""Chapter 06: DDP on gloo ranks equals one process with the global batch; ranks stay equal."""

from __future__ import annotations

import time
from dataclasses import replace

import psutil
import pytest
import torch

from hpclab.config import ConfigError
from hpclab.ddp.ddp_experiment import DDPConfig
from hpclab.dist import RankError, launch
from hpclab.train import (
    TrainSpec,
    batches,
    ddp_worker,
    flat_params,
    make_model,
    train_step,
    wrap,
)

# 512 samples, 16 per rank on 2 ranks = 16 steps per epoch: 20 steps cross into epoch 2,
# so a missing set_epoch would change the data order and show up.
SPEC = TrainSpec(
    model="tiny",
    side=8,
    per_rank_batch=16,
    steps=18,
    warmup=2,
    lr=0.1,
    samples=512,
    measure_compute=False,
    measure_allreduce=False,
    return_params=True,
)


# forked ranks start with the engine's lazy imports done (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("preloaded")


def _params(outs):
    return [o["flat_params"] for o in outs]


def test_ddp_two_ranks_equals_one_process_with_global_batch():
    ranks = launch(ddp_worker, 2, args=(SPEC,))
    serial = launch(ddp_worker, 1, args=(replace(SPEC, per_rank_batch=32),))[0]
    p0, p1 = _params(ranks)
    assert torch.equal(p0, p1), "replicas diverged"
    assert ranks[0]["params_max_diff"] == 0.0
    assert torch.allclose(p0, serial["flat_params"], rtol=1e-5, atol=1e-6)
    # ... and the comparison has teeth: one process with the per-rank batch ends elsewhere.
    small = launch(ddp_worker, 1, args=(replace(SPEC, per_rank_batch=16),))[0]
    assert not torch.allclose(p0, small["flat_params"], rtol=1e-4, atol=1e-5)
    assert ranks[0]["buckets"] >= 1 and serial["buckets"] == 0


@pytest.mark.slow
def test_ddp_three_ranks_with_gradient_accumulation_equals_serial():
    spec = replace(SPEC, samples=576, per_rank_batch=8, micro_batches=2)
    outs = launch(ddp_worker, 3, args=(spec,))
    serial = launch(ddp_worker, 1, args=(replace(spec, per_rank_batch=24, micro_batches=1),))[0]
    assert all(torch.equal(outs[0]["flat_params"], o["flat_params"]) for o in outs)
    assert torch.allclose(outs[0]["flat_params"], serial["flat_params"], rtol=1e-5, atol=1e-6)


def test_micro_batches_equal_one_full_batch_step():
    x, y = torch.rand(12, 64), torch.randint(0, 10, (12,))
    losses, params = [], []
    for k in (1, 3, 4):
        model = make_model("tiny", 64, seed=3)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        losses.append(train_step(model, opt, x, y, micro_batches=k))
        params.append(flat_params(model))
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    assert torch.allclose(params[0], params[2], atol=1e-6)
    with pytest.raises(ValueError, match="micro_batches=13"):
        train_step(model, opt, x, y, micro_batches=13)


def _dies_mid_training(ctx, spec):
    model = make_model(spec.model, spec.side**2, seed=spec.seed)
    net = wrap(ctx, model, 25.0)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    from hpclab.train import dataset

    stream = batches(ctx, spec, dataset(spec))
    for step in range(1000):
        if ctx.rank == 1 and step == 3:
            raise RuntimeError("simulated GPU fault at step 3")
        train_step(net, opt, *next(stream))
    return step


def test_a_rank_that_dies_mid_training_stops_the_run_and_is_named():
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(RankError) as info:
        launch(_dies_mid_training, 2, args=(SPEC,), timeout_s=20)
    assert info.value.rank == 1
    assert "simulated GPU fault" in str(info.value) and "Traceback" in info.value.traceback
    after = {p.pid for p in psutil.Process().children(recursive=True)}
    assert after <= before, f"processes left behind: {after - before}"


def test_strong_scaling_refuses_indivisible_batch_with_nearest_values():
    with pytest.raises(ConfigError, match=r"batch_size=100 .* ranks=3 .* nearest valid: 99, 102"):
        DDPConfig(ranks=3, batch_size=100, scaling="strong")
    assert DDPConfig(ranks=3, batch_size=99, scaling="strong").per_rank_batch == 33
    assert DDPConfig(ranks=3, batch_size=100, scaling="weak").per_rank_batch == 100


def test_run_ddp_records_and_efficiency():
    from hpclab import experiments

    res = experiments.run("ddp", ranks=2, batch_size=32, model="tiny", steps=6, warmup=2)
    live = [r for r in res.records if r["tier"] == "live"]
    model = [r for r in res.records if r["tier"] == "model"]
    assert [r["ranks"] for r in live] == [1, 2] and len(model) == 1
    one, two = live
    assert two["global_batch"] == 64 and one["global_batch"] == 32
    assert two["samples_per_s"] == pytest.approx(64 / two["step_s"])
    assert two["efficiency"] == pytest.approx(two["samples_per_s"] / (2 * one["samples_per_s"]))
    assert one["efficiency"] == 1.0 and one["comm_s"] == 0.0
    assert two["comm_s"] == pytest.approx(max(0.0, two["step_s"] - two["compute_s"]))
    assert two["params_max_diff"] == 0.0 and two["backend"] == "gloo"
    assert two["allreduce_s"] > 0 and two["startup_s"] > 0
    # MFU over both ranks' cores: model FLOPs per second / the peak of 2 x threads cores
    from hpclab.compute.device import peak_gflops

    peak, _ = peak_gflops("cpu", "fp32", 2 * two["threads_per_rank"])
    assert two["peak_gflops"] == peak and two["flops_per_sample"] == one["flops_per_sample"] > 0
    assert two["mfu"] == pytest.approx(two["flops_per_sample"] * two["samples_per_s"] / peak / 1e9)
    # The model shares out (here: repeats, weak scaling) the one-rank step and adds the
    # all-reduce: no overlap, so its efficiency stays below 1 however noisy the timings.
    share = two["per_rank_batch"] / one["per_rank_batch"]
    assert model[0]["step_s"] == pytest.approx(one["step_s"] * share + two["allreduce_s"])
    assert 0 < model[0]["efficiency"] < 1


def test_ddp_plot_shows_live_model_and_guan2019_reference():
    from hpclab import experiments
    from hpclab.ddp.plots import plot_ddp

    res = experiments.run("ddp", ranks=2, batch_size=16, steps=3, warmup=1)
    fig = plot_ddp(res)
    names = [t.name for t in fig.data]
    assert "tiny, weak (live)" in names and "tiny, weak (model)" in names
    assert sum(n.startswith("reference: Guan 2019") for n in names) == 4


@pytest.mark.slow
def test_two_runs_at_once_on_one_node_do_not_collide():
    import subprocess
    import sys

    cmd = [
        sys.executable,
        "-m",
        "hpclab.cli",
        "run",
        "allreduce",
        "--ranks",
        "2",
        "--max-bytes",
        "4096",
        "--repeat",
        "3",
        "--json",
    ]
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-300:] for o in outs]


def test_cancel_stops_all_ranks_within_seconds():
    import threading

    from hpclab import experiments
    from hpclab.progress import Cancelled, Progress

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    progress = Progress()
    outcome = {}

    def work():
        try:
            experiments.run("ddp", progress=progress, ranks=2, steps=10000, baseline=False)
        except Cancelled:
            outcome["cancelled"] = time.monotonic()

    thread = threading.Thread(target=work)
    thread.start()
    time.sleep(2.0)
    progress.cancel()
    thread.join(timeout=120)
    # 10000 steps end only by the cancel: Cancelled, not a finished run (how fast: any speed)
    assert not thread.is_alive() and "cancelled" in outcome
    after = {p.pid for p in psutil.Process().children(recursive=True)}
    assert after <= before, f"processes left behind: {after - before}"


def test_scaling_explorer_panel_runs_and_caps_ranks(monkeypatch):
    from hpclab.dist.placement import gpu_count
    from hpclab.measure.sysinfo import usable_cores
    from hpclab.widgets.scaling_explorer import scaling_explorer

    monkeypatch.setenv("HPCLAB_QUICK", "1")
    view = scaling_explorer()
    assert view.controls["ranks"].max == min(64, max(2, gpu_count(), usable_cores()))
    assert view.results and view.results[0].records[-1]["tier"] == "model"
    assert "done" in view.status.value
    view.controls["scaling"].value = "strong"
    view.controls["batch_size"].value = 33  # not divisible by 2 ranks: refused, not run
    view.start(wait=True)
    assert "nearest valid: 32, 34" in view.status.value and len(view.results) == 1


def test_one_rank_of_the_ddp_run_does_the_plain_loops_work():
    """The plain loop of benchmarks/ddp_gpu.py trains the run's own spec: the same batches and
    steps give the same losses (on the CPU here; on a GPU in tests/gpu)."""
    from hpclab.ddp.ddp_experiment import train_spec
    from hpclab.ddp.plain import plain_loop

    spec = train_spec(DDPConfig.create(ranks=1, batch_size=512, steps=8, warmup=2))
    assert spec.samples == 4096  # 8 steps per epoch: the run crosses an epoch boundary
    ours = launch(ddp_worker, 1, args=(spec,), device="cpu")[0]
    plain = launch(plain_loop, 1, args=(spec,), device="cpu")[0]
    assert ours["loss_first"] == pytest.approx(plain["loss_first"], rel=1e-6)
    assert ours["loss_last"] == pytest.approx(plain["loss_last"], rel=1e-5)
    assert ours["loss_last"] < ours["loss_first"]
    assert plain["step_s"] > 0


def test_one_gpu_allocation_shows_one_gpu_rank_and_calibrates_the_model_from_it():
    """Two ranks on an allocation with one GPU: CPU ranks, plus one GPU rank beside them; the
    scaling model then takes its compute from the GPU step (records made by hand: no GPU here)."""
    from hpclab.ddp.ddp_experiment import one_gpu_beside, one_gpu_note
    from hpclab.ddp.plots import plot_ddp
    from hpclab.ddp.scaling import from_measurements
    from hpclab.results import make_result

    auto = DDPConfig.create(ranks=2)
    assert one_gpu_beside(auto, 1) and not one_gpu_beside(auto, 0)
    assert not one_gpu_beside(auto, 2)  # two GPUs: the ranks themselves are on GPUs
    assert not one_gpu_beside(DDPConfig.create(ranks=2, device="cpu"), 1)
    assert "2 ranks cannot share one GPU" in one_gpu_note(2)
    common = {"tier": "live", "model": "tiny", "scaling": "weak", "params": 2e6, "global_batch": 64}
    cpu = [common | {"ranks": n, "device": "cpu", "step_s": 0.02 * n, "samples_per_s": 64 / 0.02,
                     "efficiency": 1.0 / n} for n in (1, 2)]  # fmt: skip
    gpu = common | {"ranks": 1, "device": "cuda:0", "step_s": 0.001, "samples_per_s": 64000.0,
                    "efficiency": None, "role": "gpu-rank"}  # fmt: skip
    ddp = make_result("ddp", auto, [*cpu, gpu])
    ar = make_result("allreduce", auto, [{"tier": "model", "alpha_s": 2e-4, "bandwidth_gbps": 1.5}])
    model = from_measurements(ddp, ar, max_gpus=8)
    one = next(r for r in model.records if r["tier"] == "model" and r["gpus"] == 1)
    assert one["step_s"] == pytest.approx(0.001, rel=1e-6)  # compute from the GPU rank
    assert [r["gpus"] for r in model.records if r["tier"] == "live"] == [1]
    names = [t.name for t in plot_ddp(ddp).data]
    assert any("one GPU rank on cuda:0" in n for n in names)
