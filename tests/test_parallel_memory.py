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


def test_strategy_model_fits_and_scales_as_the_chapter_says():
    from hpclab import experiments
    from hpclab.parallel.strategies import StrategyModelConfig, predict

    res = experiments.run("strategy-model")
    at = {(r["strategy"], r["gpus"]): r for r in res.records}
    cfg = StrategyModelConfig()
    assert all(at[k, 1]["efficiency"] == 1.0 for k in ("data", "pipeline", "tensor"))
    # data parallel never shrinks the model: it fits nowhere or everywhere
    assert (
        len({at["data", n]["memory_gb"] for n in (1, 64, 512)}) == 1 and not at["data", 1]["fits"]
    )
    # tensor parallel inside a node fits; across the network its all-reduces swamp it
    assert at["tensor", 8]["fits"] and at["tensor", 64]["efficiency"] < 0.2
    assert at["tensor+data", 512]["efficiency"] > 3 * at["data", 512]["efficiency"]
    assert max(n for (k, n) in at if k == "pipeline") <= cfg.blocks and ("pipeline", 64) not in at
    p = predict(cfg, "pipeline", 8)
    m = cfg.tokens // cfg.micro_tokens
    assert p["bubble_s"] == pytest.approx(p["compute_s"] * 7 / m)
    assert len(experiments.get("strategy-model").plot(res).data) == 9
