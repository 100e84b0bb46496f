"""Chapter 09 part 2, §6: HSDP on chapter 07's two Slurm nodes, one torchrun per node (the
ddp-multinode launch path, :class:`hpclab.cluster.multinode.Torchrun`), needs root. ~20 s."""

from __future__ import annotations

import pytest

from hpclab import experiments
from hpclab.sharding.floor import equal_weights


def test_hsdp_across_two_slurm_nodes_matches_ddp_and_its_byte_model(cluster):
    result = experiments.run(
        "fsdp", strategy=("ddp", "hsdp"), ranks=4, nodes=2, launch="slurm", width=32, depth=2,
        steps=2, warmup=1,
    )  # fmt: skip
    ddp, hsdp = result.records
    assert hsdp["hosts"] == "node1,node2"  # the ranks really ran on both nodes
    # equal up to the order of the sums (the run measures that floor: DDP summed in reverse)
    assert equal_weights(hsdp["params_max_diff_vs_ddp"], hsdp["params_max_diff_floor"])
    assert hsdp["weights_equal_to_ddp"]
    assert hsdp["state_bytes_per_rank"] == pytest.approx(ddp["state_bytes_per_rank"] / 2, rel=0.01)
    for where in ("intra_node", "inter_node"):
        assert hsdp[f"comm_bytes_{where}"] == pytest.approx(hsdp[f"model_comm_bytes_{where}"])
    assert 0 < hsdp["comm_bytes_inter_node"] < ddp["comm_bytes_inter_node"]
