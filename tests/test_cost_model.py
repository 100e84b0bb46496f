"""Chapter 06: the scaling model reproduces a hand-computed example and Guan 2019's lesson."""

from __future__ import annotations

import pytest

from hpclab.ddp.cost_model import WORKLOADS, Workload, predict, ring_allreduce_s, step_s
from hpclab.ddp.plots import reference_scaling


def test_hand_computed_example():
    # n=4, 100 MB gradients, alpha=10 us, B=10 GB/s:
    # allreduce = 2*3*10e-6 + 2*3/4 * 1e8 / 1e10 = 6e-5 + 0.015 = 0.01506 s
    assert ring_allreduce_s(1e8, 4, 10e-6, 1e10) == pytest.approx(0.01506)
    assert ring_allreduce_s(1e8, 1, 10e-6, 1e10) == 0.0
    # compute 0.1 s, half of the all-reduce hidden: 0.1 + 0.01506 - 0.00753
    assert step_s(0.1, 0.01506, 0.5) == pytest.approx(0.10753)
    # overlap can never hide more than the compute
    assert step_s(0.001, 0.01, 1.0) == pytest.approx(0.01)
    w = Workload(25e6, 100, 100.0, 0.0, "weak", "", "test")
    p = predict(w, 4, "weak", "pcie3", "ib-edr", 8, bandwidth_gbps=10.0, alpha_us=10.0)
    assert p.comm_s == pytest.approx(0.01506)
    assert p.step_s == pytest.approx(0.11506)
    assert p.samples_per_s == pytest.approx(400 / 0.11506)
    assert p.efficiency == pytest.approx(0.1 / 0.11506)


def test_network_takes_over_beyond_one_node():
    w = WORKLOADS["horovod-resnet50-guan2019"]
    inside = predict(w, 8, "weak", "nvlink-v100", "eth-10g", 8)
    across = predict(w, 16, "weak", "nvlink-v100", "eth-10g", 8)
    assert inside.link == "nvlink-v100" and "eth-10g" in across.link
    assert across.comm_s > 20 * inside.comm_s


def test_model_predicts_guan2019_mnist_slowdown_and_resnet_gain():
    mnist = WORKLOADS["mnist-guan2019"]
    one = predict(mnist, 1, "strong", "pcie3", "ib-edr", 8)
    two = predict(mnist, 2, "strong", "pcie3", "ib-edr", 8)
    assert two.samples_per_s < one.samples_per_s  # Guan 2019: 2 GPUs slower than 1
    resnet = WORKLOADS["resnet50-guan2019"]
    r1, r8 = (predict(resnet, n, "strong", "pcie3", "ib-edr", 8) for n in (1, 8))
    assert r8.samples_per_s > 3 * r1.samples_per_s and r8.efficiency < 1.0


def test_reference_tables_from_guan2019():
    mnist = reference_scaling(
        "guan2019_mnist_multigpu", {"api": "keras", "gpu": "v100", "batch_size": 256}
    )
    assert [r["gpus"] for r in mnist] == [1, 2, 4, 6, 8]
    assert mnist[1]["samples_per_s"] < mnist[0]["samples_per_s"]
    assert mnist[0]["samples_per_s"] == pytest.approx(256 * 20000 / 128)
    resnet = reference_scaling("guan2019_resnet50_v100")
    assert resnet[-1]["efficiency"] == pytest.approx(1132 / (8 * 345))
    horovod = reference_scaling("guan2019_horovod_resnet50")
    assert horovod[0]["gpus"] == 2 and horovod[0]["efficiency"] == pytest.approx(1.0)
    assert horovod[-1]["efficiency"] == pytest.approx(9318.20 / (32 * 322.93))
    assert all(r["tier"] == "reference" and "Guan 2019" in r["source"] for r in horovod)


def test_scaling_model_experiment_reaches_512_and_overlays_reference():
    from hpclab import experiments

    res = experiments.run("scaling-model", workload="horovod-resnet50-guan2019", max_gpus=512)
    model = [r for r in res.records if r["tier"] == "model"]
    ref = [r for r in res.records if r["tier"] == "reference"]
    assert [r["gpus"] for r in model] == [2**k for k in range(10)]
    assert len(ref) == 6 and model[0]["efficiency"] == pytest.approx(1.0)
    assert all(
        a["efficiency"] >= b["efficiency"] - 1e-12 for a, b in zip(model, model[1:], strict=False)
    )
    custom = experiments.run(
        "scaling-model",
        workload="custom",
        scaling="weak",
        params_m=1,
        compute_ms=10,
        batch_size=32,
        max_gpus=4,
        bandwidth_gbps=1,
        alpha_us=0,
    )
    # 4 GPUs: 2*3/4 * 4e6 B / 1e9 B/s = 6 ms on top of 10 ms
    assert custom.records[-1]["step_s"] == pytest.approx(0.016)


def test_scaling_plot_and_table():
    from hpclab import experiments
    from hpclab.ddp.scaling import model_vs_reference, plot_scaling_model

    fig = plot_scaling_model(experiments.run("scaling-model", workload="resnet50-guan2019"))
    assert [t.name for t in fig.data][0] == "model"
    assert any(t.name.startswith("reference: Guan 2019") for t in fig.data)
    table = model_vs_reference(workload="resnet50-guan2019")
    assert list(table.index) == [1, 2, 4, 8]
    assert table.loc[8, "Guan 2019 samples/s"] == 1132


def test_model_calibrated_from_own_measurements():
    from hpclab import experiments
    from hpclab.ddp.scaling import from_measurements, plot_scaling_model

    ddp = experiments.run("ddp", ranks=2, batch_size=32, steps=4, warmup=1)
    ar = experiments.run("allreduce", ranks=2, max_bytes=2**20, repeat=3)
    res = from_measurements(ddp, ar, max_gpus=8)
    model = [r for r in res.records if r["tier"] == "model"]
    live = [r for r in res.records if r["tier"] == "live"]
    base = ddp.records[0]
    fit = next(r for r in ar.records if r["tier"] == "model")
    assert model[0]["step_s"] == pytest.approx(base["step_s"])  # one GPU: compute only
    expected = base["step_s"] + ring_allreduce_s(
        4 * base["params"], 2, fit["alpha_s"], fit["bandwidth_gbps"] * 1e9
    )
    assert model[1]["step_s"] == pytest.approx(expected)
    assert [r["gpus"] for r in live] == [1, 2]
    assert any(t.name == "measured here (live)" for t in plot_scaling_model(res).data)
