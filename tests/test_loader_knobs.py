"""Chapter 04's DataLoader knobs: persistent workers, prefetch_factor, and pin_memory routed
through placement (said when not possible). Cost: ~5 s (worker processes start per epoch)."""

from __future__ import annotations

import pytest
import torch

from hpclab import experiments
from hpclab.dist.placement import place


def test_persistent_workers_survive_the_epoch_and_fresh_ones_do_not():
    from hpclab.storage.loader_knobs import startup_summary

    res = experiments.run(
        "loader-knobs", workers=2, batch_size=16, batches=3, epochs=2, prefetch_factor=(1, 2),
        open_latency_ms=0.0, compute_ms=0.0,
    )  # fmt: skip
    epochs = [r for r in res.records if r["kind"] == "epoch"]
    fresh = [set(r["worker_pids"]) for r in epochs if not r["persistent_workers"]]
    kept = [set(r["worker_pids"]) for r in epochs if r["persistent_workers"]]
    assert len(fresh) == len(kept) == 2 and all(len(p) == 2 for p in fresh + kept)
    assert fresh[0].isdisjoint(fresh[1])  # new processes every epoch
    assert kept[0] == kept[1]  # the same two workers serve both epochs
    summary = {s["persistent_workers"]: s["worker_sets"] for s in startup_summary(res)}
    assert summary == {False: 2, True: 1}
    pre = [r for r in res.records if r["kind"] == "prefetch"]
    assert [r["prefetch_factor"] for r in pre] == [1, 2]
    assert all(r["samples"] == 16 * 3 for r in epochs + pre)  # every batch arrived, once
    experiments.get("loader-knobs").plot(res)


def test_pin_memory_goes_through_placement_and_says_when_it_cannot():
    assert place(1, "cpu").pin_memory(False) == (False, "")
    pin, why = place(1, "cpu").pin_memory(True)
    assert not pin and why.startswith("pin_memory=True not possible here")
    assert place(1, "cuda", gpus=1).pin_memory(True) == (True, "")  # a GPU node's decision


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU node the batches are pinned")
def test_loader_no_longer_drops_pin_memory_silently():
    res = experiments.run(
        "loader", format=("memmap",), samples=64, batch_size=(8,), workers=(0,), batches=3,
        pin_memory=True,
    )  # fmt: skip
    (r,) = res.records
    assert r["pin_memory"] is False and "not possible here" in r["pin_note"]


def test_prefetch_factor_must_be_positive():
    from hpclab.config import ConfigError

    with pytest.raises(ConfigError, match="prefetch_factor"):
        experiments.get("loader-knobs").config.create(prefetch_factor=(0,))
