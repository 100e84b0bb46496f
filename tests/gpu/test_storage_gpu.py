"""Chapter 04 on a GPU: pinned batches, training on CUDA, and the waiting share it exposes."""

from __future__ import annotations

import pytest
import torch

from hpclab import experiments

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _scratch(tmp_path, monkeypatch):
    monkeypatch.setenv("HPCLAB_DATA", str(tmp_path / "data"))


def test_loader_pins_batches_when_a_gpu_is_there(tmp_path):
    from hpclab.storage import pack
    from hpclab.storage.data import SyntheticImages
    from hpclab.storage.loading import make_loader

    pack(SyntheticImages(256, (3, 16, 16)), "memmap", tmp_path / "m")
    x, _ = next(iter(make_loader(tmp_path / "m", 64, workers=2, pin_memory=True, batches=2)))
    assert x.is_pinned()
    res = experiments.run(
        "loader",
        format=("memmap",),
        samples=256,
        shape=(3, 16, 16),
        batch_size=(64,),
        workers=(0,),
        pin_memory=True,
        batches=4,
    )
    assert all(r["pin_memory"] is True for r in res.records)


def test_data_wait_trains_on_cuda_and_waits_more_for_a_slow_format():
    res = experiments.run(
        "data-wait",
        format=("memmap", "files-npy"),
        samples=512,
        shape=(3, 32, 32),
        steps=10,
        open_latency_ms=2.0,
        device="cuda",
    )
    summary = {r["format"]: r for r in res.records if r["kind"] == "summary"}
    assert all(r["device"] == "cuda:0" for r in summary.values())  # where it ran (placement)
    assert summary["files-npy"]["wait_fraction"] > summary["memmap"]["wait_fraction"]
    assert summary["files-npy"]["wait_fraction"] > 0.8  # a GPU step is short: the loader dominates
    assert torch.cuda.is_available()
