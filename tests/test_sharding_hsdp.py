"""Chapter 09 part 2, §6: HSDP (ZeRO-3 inside a node, replicas across nodes) beside ZeRO-3 over
all ranks and DDP, on 4 gloo ranks standing for 2 nodes x 2; the byte model and the planner."""

from __future__ import annotations

import pytest

from hpclab import experiments
from hpclab.config import ConfigError
from hpclab.sharding.comm_model import comm_bytes
from hpclab.sharding.floor import equal_weights
from hpclab.sharding.planner import PlanConfig, plan


@pytest.fixture(scope="module")
def two_nodes():
    """One run of ddp, zero3 and hsdp on 4 ranks as 2 nodes x 2 (~10 s on 2 busy cores): 3
    layers of width 64, Adam, warm-up 2 + 1 probed + 10 timed = 13 steps each."""
    return experiments.run(
        "fsdp", strategy=("ddp", "zero3", "hsdp"), ranks=4, nodes=2, width=64, depth=3,
        steps=10, warmup=2,
    )  # fmt: skip


def _by(result):
    return {r["strategy"]: r for r in result.records}


def test_hsdp_ends_on_ddps_weights(two_nodes):
    rows = _by(two_nodes)
    for name in ("zero3", "hsdp"):  # 4 ranks: up to the order of the gradients' sum
        rec = rows[name]
        assert equal_weights(rec["params_max_diff_vs_ddp"], rec["params_max_diff_floor"]), name


def test_hsdp_shards_the_state_over_one_node(two_nodes):
    rows = _by(two_nodes)
    ddp, zero3, hsdp = (rows[s]["state_bytes_per_rank"] for s in ("ddp", "zero3", "hsdp"))
    # 1/S of DDP's state (S = 2 ranks a node), not ZeRO-3's 1/N (N = 4)
    assert hsdp == pytest.approx(rows["hsdp"]["model_state_bytes"], rel=0.01)
    assert hsdp == pytest.approx(ddp / 2, rel=0.01)
    assert hsdp == pytest.approx(2 * zero3, rel=0.02)  # ZeRO-3 pads each layer to 4 shards


def test_hsdp_sends_less_across_nodes_than_zero3(two_nodes):
    rows = _by(two_nodes)
    for rec in rows.values():  # the measured split is the model's
        for where in ("intra_node", "inter_node"):
            assert rec[f"comm_bytes_{where}"] == pytest.approx(
                rec[f"model_comm_bytes_{where}"], rel=0.01, abs=1.0
            ), (rec["strategy"], where)
        assert rec["comm_bytes_intra_node"] + rec["comm_bytes_inter_node"] == pytest.approx(
            rec["comm_bytes_per_step"]
        )
    # every collective of DDP and ZeRO-3 spans both nodes; HSDP's all-gathers and reduce-scatters
    # stay inside a node and only the shard's all-reduce crosses
    assert rows["ddp"]["comm_bytes_intra_node"] == rows["zero3"]["comm_bytes_intra_node"] == 0
    assert rows["hsdp"]["comm_bytes_intra_node"] > 0
    inter = {s: rows[s]["comm_bytes_inter_node"] for s in rows}
    assert inter["hsdp"] < inter["ddp"] < inter["zero3"]
    # 2 (R-1)/R x Psi/S against 3 (N-1)/N x Psi: 0.5 against 2.25 model bytes
    assert inter["hsdp"] / inter["zero3"] == pytest.approx(0.5 / 2.25, rel=0.01)
    assert set(rows["hsdp"]["comm_calls"]) == {"all_gather", "reduce_scatter", "all_reduce"}


def test_the_model_degenerates_to_zero3_and_ddp():
    """One node: HSDP is ZeRO-3; one rank a node: HSDP sends DDP's bytes, all across nodes."""
    p = 1e6
    assert comm_bytes("hsdp", p, 8, 1) == comm_bytes("zero3", p, 8, 1)
    assert comm_bytes("hsdp", p, 8, 8) == comm_bytes("ddp", p, 8, 8)
    assert comm_bytes("ddp", p, 8, 8)["intra_node"] == 0.0


def test_the_planner_shows_hsdp_beside_the_stages():
    """7.5 B parameters, mixed Adam, 64 GPUs as 8 nodes of 8 (the ZeRO paper's example)."""
    cfg = PlanConfig.create(params_b=7.5, gpus=64, gpus_per_node=8, micro_batch=0)
    hsdp, zero3, ddp = plan(cfg, "hsdp"), plan(cfg, 3), plan(cfg, 0)
    psi = 7.5e9
    assert hsdp["total_gb"] == pytest.approx(16 * psi / 8 / 1e9)  # ZeRO-3 over one node's 8
    assert zero3["total_gb"] == pytest.approx(16 * psi / 64 / 1e9)
    # across nodes: ZeRO-3 3 (N-1)/N x 2 bytes x Psi; HSDP 2 (R-1)/R x 2 bytes x Psi / 8
    assert zero3["inter_node_gb_per_step"] == pytest.approx(3 * 63 / 64 * 2 * psi / 1e9)
    assert hsdp["inter_node_gb_per_step"] == pytest.approx(2 * 7 / 8 * 2 * psi / 8 / 1e9)
    assert hsdp["intra_node_gb_per_step"] == pytest.approx(3 * 7 / 8 * 2 * psi / 1e9)
    assert ddp["inter_node_gb_per_step"] == pytest.approx(2 * 63 / 64 * 2 * psi / 1e9)
    strategies = [r["strategy"] for r in experiments.run("zero-plan", micro_batch=0).records]
    assert len(strategies) == 5 and strategies[-1].startswith("HSDP")


@pytest.mark.parametrize(
    ("name", "params", "fragment"),
    [
        ("fsdp", {"strategy": ("hsdp",), "ranks": 6, "nodes": 4},
         "ranks=6 do not split evenly over nodes=4 (hsdp keeps one replica a node, ranks / "
         "nodes shards in each); allowed: nodes in {1, 2, 3, 6}"),
        ("zero-plan", {"gpus": 12, "gpus_per_node": 8},
         "gpus=12 is not a whole number of nodes of gpus_per_node=8; allowed: gpus <= 8 or a "
         "multiple of it"),
    ],
)  # fmt: skip
def test_ranks_that_do_not_fill_whole_nodes_are_one_line(name, params, fragment):
    with pytest.raises(ConfigError) as err:
        experiments.get(name).config.create(**params)
    assert str(err.value) == fragment
