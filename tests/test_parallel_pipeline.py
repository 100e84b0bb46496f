"""Chapter 06 part 2: pipeline stages on ranks equal one process; the bubble model holds."""

from __future__ import annotations

import pytest
import torch

from hpclab.config import ConfigError
from hpclab.parallel.pipeline import (
    SCHEDULES,
    PassCosts,
    bubble_model,
    extended_bubble,
    idle_fractions,
    measured_costs,
    schedule,
    simulate,
)
from hpclab.parallel.pipeline_experiment import PipelineConfig, serial_params

SMALL = dict(layers=6, width=32, batch_size=48, micro_batches=4, steps=1, rounds=1, check_steps=2)


@pytest.mark.parametrize("kind", SCHEDULES)
@pytest.mark.parametrize(("p", "m"), [(2, 1), (2, 8), (3, 5), (4, 4), (4, 16)])
def test_schedules_are_complete_ordered_and_give_the_model_bubble(kind, p, m):
    eff_m = 1 if kind == "naive" else m
    for r in range(p):
        ops = schedule(kind, r, p, m)
        assert sorted(ops) == sorted(
            [("F", i) for i in range(eff_m)] + [("B", i) for i in range(eff_m)]
        )
        assert all(ops.index(("F", i)) < ops.index(("B", i)) for i in range(eff_m))
    for fwd, bwd in ((1.0, 2.0), (1.0, 1.0)):
        idle = idle_fractions(simulate(kind, p, m, fwd, bwd))
        assert idle == pytest.approx([bubble_model(p, eff_m)] * p)


def test_costs_are_read_on_one_clock_from_every_hand_over():
    # GPipe, 2 stages, m = 2, passes of 1 s; rank 1's step started 0.05 s after rank 0's (its
    # times count from there). Rank 0 leaves 0.3 s after F0 to post its send. F0 reaches a
    # waiting rank 1 after 0.1 s; F1 arrives 0.2 s after rank 1 is free and costs it 0.1 s; B0
    # reaches rank 0 0.15 s after it ends; B1 arrives while rank 0 still runs B0 and costs it
    # 0.1 s (its receive copy) once B0 ends.
    rank0 = [("F", 0, 0.0, 1.0), ("F", 1, 1.3, 2.3), ("B", 0, 4.55, 5.55), ("B", 1, 5.65, 6.65)]
    rank1 = [("F", 0, 1.05, 2.05), ("F", 1, 2.35, 3.35), ("B", 0, 3.35, 4.35), ("B", 1, 4.4, 5.4)]
    got = measured_costs([rank0, rank1], [10.0, 10.05])
    assert got.message_s == pytest.approx((0.1 + 0.1 + 0.15 + 0.1) / 4)
    assert got.send_s == pytest.approx([0.3, (0.0 + 0.05) / 2])
    assert got.forward_s == pytest.approx([1.0, 1.0]) and got.backward_s == pytest.approx(
        [1.0, 1.0]
    )
    # free messages, equal stages: a simulated step gives back its own costs
    sim = simulate("gpipe", 3, 4, 1.0, 2.0)
    back = measured_costs(sim, [0.0] * 3)
    assert back == PassCosts([1.0] * 3, [2.0] * 3, [0.0] * 3, 0.0)


@pytest.mark.parametrize("kind", ["gpipe", "1f1b"])
def test_extended_model_adds_what_the_simple_one_leaves_out(kind):
    p, m = 2, 8
    free = PassCosts([1.0] * p, [2.0] * p, [0.0] * p, 0.0)
    assert extended_bubble(kind, m, free) == pytest.approx(bubble_model(p, m))
    # dear hand-overs: every received micro-batch makes its receiver wait, so the bubble grows
    dear = PassCosts([1.0] * p, [2.0] * p, [0.0] * p, 0.5)
    assert extended_bubble(kind, m, dear) > bubble_model(p, m) + 0.05
    # a slow second stage paces the forwards, a slow first one the backwards: both idle more
    # than with the slow stage in one phase only, which a single "slowest stage" misses
    split = PassCosts([1.0, 1.5], [3.0, 2.0], [0.0] * p, 0.0)
    one = PassCosts([1.0, 1.5], [2.0, 3.0], [0.0] * p, 0.0)
    assert extended_bubble("gpipe", m, split) > extended_bubble("gpipe", m, one)


def test_1f1b_keeps_fewer_micro_batches_in_flight_than_gpipe():
    def in_flight(ops):
        live, peak = 0, 0
        for op, _ in ops:
            live += 1 if op == "F" else -1
            peak = max(peak, live)
        return peak

    p, m = 4, 8
    assert [in_flight(schedule("gpipe", r, p, m)) for r in range(p)] == [m] * p
    assert [in_flight(schedule("1f1b", r, p, m)) for r in range(p)] == [4, 3, 2, 1]


@pytest.mark.parametrize("stages", [2, 3])
def test_pipeline_on_ranks_equals_one_process(stages):
    from hpclab import experiments

    res = experiments.run("pipeline", stages=stages, **SMALL)
    rows = {r["schedule"]: r for r in res.records if r["kind"] == "schedule"}
    assert set(rows) == set(SCHEDULES)
    for r in rows.values():
        assert r["max_diff_vs_serial"] < 1e-5, r["schedule"]
        assert r["bubble_model"] == pytest.approx(bubble_model(stages, r["micro_batches"]))
        assert 0.0 <= r["bubble_measured"] < 1.0
    # the comparison has teeth: one step fewer ends elsewhere
    cfg = PipelineConfig.create(stages=stages, **SMALL)
    assert not torch.allclose(serial_params(cfg, 1), serial_params(cfg, 2), atol=1e-5)
    assert rows["naive"]["micro_batches"] == 1 and rows["gpipe"]["micro_batches"] == 4
    ranks = [r for r in res.records if r["kind"] == "rank"]
    first = {r["schedule"]: r for r in ranks if r["rank"] == 0}
    assert first["gpipe"]["max_in_flight"] == 4 and first["1f1b"]["max_in_flight"] == stages
    assert first["1f1b"]["activation_peak_bytes"] < first["gpipe"]["activation_peak_bytes"]
    events = [r for r in res.records if r["kind"] == "event" and r["schedule"] == "gpipe"]
    assert len(events) == 2 * 4 * stages and all(e["end_s"] >= e["start_s"] for e in events)
    fig = experiments.get("pipeline").plot(res)
    assert len(fig.data) == 2 * len(SCHEDULES)


def test_pipeline_config_refuses_bad_splits():
    with pytest.raises(
        ConfigError, match=r"batch_size=50 .* micro_batches=8; nearest valid: 48, 56"
    ):
        PipelineConfig(batch_size=50, micro_batches=8)
    with pytest.raises(ConfigError, match=r"stages=5 exceeds layers=4"):
        PipelineConfig(stages=5, layers=4)
