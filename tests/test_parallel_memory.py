"""Chapter 06 part 2: bytes per rank, measured on ranks, equal the memory model."""

from __future__ import annotations

import pytest

from hpclab.config import ConfigError
from hpclab.parallel.memory import MemoryConfig, model_bytes


@pytest.mark.parametrize("ranks", [2, 4])
def test_measured_bytes_per_rank_equal_the_model(ranks):
    from hpclab import experiments

    res = experiments.run("parallel-memory", ranks=ranks, blocks=4, width=32, batch_size=32)
    assert len(res.records) == ranks * 4 * 4
    for r in res.records:
        assert r["bytes"] == r["model_bytes"] > 0, r
    by = {(r["strategy"], r["rank"], r["kind"]): r["bytes"] for r in res.records}
    # data parallel keeps the whole model on every rank; the model-parallel ones 1/p of it
    assert by["data", 0, "params"] == ranks * by["pipeline-gpipe", 0, "params"]
    assert by["tensor", 0, "params"] < by["data", 0, "params"] / ranks * 1.1
    assert by["data", 0, "optimizer"] == 2 * by["data", 0, "params"]  # Adam: two moments
    # 1F1B on rank r keeps p - r micro-batches alive, GPipe all 8
    assert (
        by["pipeline-1f1b", 0, "activations"] * 8 == by["pipeline-gpipe", 0, "activations"] * ranks
    )
    plot = experiments.get("parallel-memory").plot(res)
    assert len(plot.data) == 5


def test_memory_model_and_bad_input():
    cfg = MemoryConfig(ranks=2, blocks=2, width=8, batch_size=4, micro_batches=2)
    blk = 8 * 64 + 5 * 8
    assert model_bytes("data", cfg)["params"] == 4 * 2 * blk
    assert model_bytes("data", cfg)["activations"] == 2 * 20 * 2 * 8
    assert model_bytes("tensor", cfg)["activations"] == 2 * 4 * 4 * (8 + 16)
    with pytest.raises(ConfigError, match=r"blocks=3 is not divisible by ranks=2"):
        MemoryConfig(ranks=2, blocks=3)
