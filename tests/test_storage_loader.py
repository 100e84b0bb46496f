"""Chapter 04: readers open lazily per DataLoader worker; the experiments measure what they say."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from hpclab import experiments
from hpclab.storage import open_dataset, pack
from hpclab.storage.data import SyntheticImages

N, SHAPE = 400, (3, 16, 16)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("loader")
    src = SyntheticImages(N, SHAPE, seed=5)
    for fmt in ("lmdb", "hdf5", "memmap"):
        pack(src, fmt, root / fmt)
    return root, src


@pytest.fixture(scope="module", autouse=True)
def scratch(tmp_path_factory):
    """Experiments pack into $HPCLAB_DATA: a private directory for this module."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HPCLAB_DATA", str(tmp_path_factory.mktemp("scratch")))
        yield


@pytest.mark.parametrize("fmt", ["lmdb", "hdf5"])
def test_handles_open_lazily_and_never_travel(fmt, data):
    ds = open_dataset(data[0] / fmt)
    assert not ds.is_open  # nothing opened in __init__
    ds[0]
    assert ds.is_open
    clone = pickle.loads(pickle.dumps(ds))  # what a spawned worker receives
    assert not clone.is_open
    np.testing.assert_array_equal(clone[3][0].numpy(), ds[3][0].numpy())


@pytest.mark.parametrize("fmt", ["lmdb", "hdf5"])
def test_two_forked_workers_after_the_parent_opened(fmt, data, no_orphans):
    root, src = data
    ds = open_dataset(root / fmt)
    ds[0]  # the parent holds an open handle before the workers fork
    batches = list(DataLoader(ds, batch_size=32, num_workers=2))
    x = torch.cat([b[0] for b in batches]).numpy()
    y = torch.cat([b[1] for b in batches]).tolist()
    want = [src.sample(i) for i in range(N)]
    np.testing.assert_array_equal(x, np.stack([w[0] for w in want]))
    assert y == [w[1] for w in want]


def test_spawned_worker_opens_its_own_lmdb(data):
    ds = open_dataset(data[0] / "lmdb")
    ds[0]
    loader = DataLoader(ds, batch_size=100, num_workers=1, multiprocessing_context="spawn")
    assert sum(len(b[1]) for b in loader) == N


def test_storage_read_records(data):
    res = experiments.run(
        "storage-read", format=("lmdb", "files-npy"), samples=300, shape=SHAPE, repeat=1
    )
    rows = {(r["format"], r["cache"], r["order"]): r for r in res.records}
    assert len(rows) == 8
    for r in rows.values():
        assert r["samples"] == 300 and r["samples_per_s"] > 0
        assert r["mb_per_s"] == pytest.approx(r["samples_per_s"] * 768 / 1e6)
    assert rows[("lmdb", "warm", "random")]["resident_before"] > 0.9
    # The chapter's claim: one file per sample is far slower than LMDB for random reads.
    ratio = (
        rows[("lmdb", "warm", "random")]["samples_per_s"]
        / rows[("files-npy", "warm", "random")]["samples_per_s"]
    )
    assert ratio > 2, ratio


def test_loader_records_and_plot(data):
    res = experiments.run(
        "loader",
        format=("memmap",),
        samples=300,
        shape=SHAPE,
        batch_size=(8, 32),
        workers=(0,),
        batches=5,
    )
    assert [(r["batch_size"], r["workers"]) for r in res.records] == [(8, 0), (32, 0)]
    for r in res.records:
        assert r["samples_per_s"] == pytest.approx(4 * r["batch_size"] / r["seconds"])
        assert r["seconds_per_100_batches"] == pytest.approx(100 * r["seconds"] / 4)
    fig = experiments.get("loader").plot(res)
    assert any("reference: Fox et al. 2015" in t.name for t in fig.data)


def test_data_wait_shows_a_slow_format_starving_the_model():
    res = experiments.run(
        "data-wait",
        format=("memmap", "files-npy"),
        samples=200,
        shape=(1, 8, 8),
        batch_size=32,
        steps=6,
        open_latency_ms=3.0,
        device="cpu",
    )
    summary = {r["format"]: r for r in res.records if r["kind"] == "summary"}
    steps = [r for r in res.records if r["kind"] == "step"]
    assert len(steps) == 12
    # 32 opens x 3 ms of simulated metadata latency per batch dwarf a tiny MLP step: every
    # files-npy step waits at least that long (a floor at any speed); memmap opens nothing (no
    # comparison of the two times: on a loaded machine memmap's short waits can stretch too)
    npy = [r for r in steps if r["format"] == "files-npy"]
    assert all(r["wait_s"] >= 0.95 * 32 * 0.003 for r in npy), [r["wait_s"] for r in npy]
    assert summary["files-npy"]["wait_fraction"] > 0.5


def test_staging_tar_beats_small_files_on_a_slow_shared_fs():
    res = experiments.run("staging", files=200, shape=(3, 8, 8), open_latency_ms=2.0)
    live = {r["method"]: r for r in res.records if r["tier"] == "live"}
    model = {r["method"]: r for r in res.records if r["tier"] == "model"}
    assert live["files"]["opens"] == 202 and live["tar"]["opens"] == 1
    assert live["files"]["simulated_seconds"] >= 202 * 0.002
    assert live["files"]["seconds"] > live["tar"]["seconds"]
    assert live["files"]["seconds"] >= model["files"]["seconds"]
    assert any(r["tier"] == "reference" and "Mao 2017" in r["source"] for r in res.records)


def test_cli_pack_then_read_json(tmp_path):
    env = {**os.environ, "HPCLAB_QUICK": "1"}
    out = tmp_path / "ds"
    cmd = [sys.executable, "-m", "hpclab.cli", "run"]
    subprocess.run(
        [
            *cmd,
            "pack",
            "--format",
            "hdf5",
            "--samples",
            "100",
            "--shape",
            "1,8,8",
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
        env=env,
        timeout=120,
    )
    proc = subprocess.run(
        [*cmd, "storage-read", "--format", "hdf5", "--path", str(out), "--cache", "warm", "--json"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    obj = json.loads(proc.stdout)
    assert obj["experiment"] == "storage-read"
    assert {r["order"] for r in obj["records"]} == {"random", "sequential"}
    assert all(r["samples"] == 100 and r["mb_per_s"] > 0 for r in obj["records"])


def test_live_wait_monitor_draws_every_step():
    from hpclab.widgets.wait_monitor import wait_monitor

    m = wait_monitor(
        format=("memmap", "files-npy"),
        samples=200,
        shape=(1, 8, 8),
        steps=5,
        open_latency_ms=2.0,
        device="cpu",
    )
    m.start(wait=True)
    assert "done: 10 steps" in m.status.value
    assert len(m.figure.data[0].x) == len(m.figure.data[1].y) == 10
    assert "memmap" in m.figure.layout.title.text and "files-npy" in m.figure.layout.title.text
