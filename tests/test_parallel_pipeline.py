"""Chapter 06 part 2: pipeline stages on ranks equal one process; the bubble model holds."""

from __future__ import annotations

import pytest
import torch

from hpclab.config import ConfigError
from hpclab.parallel.pipeline import (
    SCHEDULES,
    bubble_model,
    handover_seconds,
    idle_fractions,
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


def test_handovers_are_read_on_one_clock_and_only_where_the_receiver_waited():
    # GPipe, 2 stages, m = 2, passes of 1 s, every message 0.1 s; rank 1's step started 0.05 s
    # after rank 0's (its times count from there). F1 reaches rank 1 while it still runs F0 and
    # B1 reaches rank 0 while it still runs B0: those two show no hand-over.
    rank0 = [("F", 0, 0.0, 1.0), ("F", 1, 1.0, 2.0), ("B", 0, 4.2, 5.2), ("B", 1, 5.2, 6.2)]
    rank1 = [("F", 0, 1.05, 2.05), ("F", 1, 2.05, 3.05), ("B", 0, 3.05, 4.05), ("B", 1, 4.05, 5.05)]
    got = handover_seconds([rank0, rank1], [10.0, 10.05])
    assert got == pytest.approx([0.1, 0.1])
    # free messages, equal stages: the simulated hand-overs all take no time
    sim = simulate("gpipe", 3, 4, 1.0, 2.0)
    free = handover_seconds(sim, [0.0] * 3)
    assert len(free) >= 4 and free == pytest.approx([0.0] * len(free))


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
