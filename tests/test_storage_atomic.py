"""Chapter 04: a writer killed mid-way (SIGKILL, as by a job's time limit) leaves either the
previous complete output or nothing under the final name, never a half dataset that reads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from hpclab.storage import StorageError, open_dataset, pack
from hpclab.storage.data import SyntheticImages
from hpclab.storage.dataset import read_manifest

WRITER = """
import sys, time
from hpclab.storage import pack
from hpclab.storage.data import SyntheticImages

class Slow(SyntheticImages):
    def sample(self, i):
        if i == 120:
            print("MIDWAY", flush=True)  # 120 samples written, more to come
        if i >= 120:
            time.sleep(0.02)
        return super().sample(i)

fmt, out, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
pack(Slow(400, (3, 16, 16), seed=seed), fmt, out, chunk=40, per_shard=50)
print("DONE", flush=True)
"""


def start_and_kill(fmt: str, out) -> None:
    """Start a writer process, wait until it is half-way, SIGKILL it."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, fmt, str(out), "7"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    timer = threading.Timer(60, proc.kill)  # never hang the test suite
    timer.start()
    try:
        line = proc.stdout.readline()
        assert line.strip() == "MIDWAY", (
            f"writer did not get half-way: {line!r} {proc.stderr.read()}"
        )
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        timer.cancel()
        proc.stdout.close()
        proc.stderr.close()


def leftovers(out):
    return sorted(p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.tmp-"))


@pytest.mark.parametrize("fmt", ["lmdb", "files-npy", "shards", "hdf5"])
def test_killed_first_write_leaves_nothing_under_the_final_name(fmt, tmp_path):
    out = tmp_path / "data"
    start_and_kill(fmt, out)
    assert not out.exists()
    partial = leftovers(out)
    assert len(partial) == 1 and any(partial[0].iterdir())  # it really was mid-write
    with pytest.raises(StorageError):
        open_dataset(out)
    with pytest.raises(StorageError, match="no manifest"):
        read_manifest(partial[0])  # the half output does not read as a dataset either
    # The next write cleans up the dead writer's temporary directory.
    pack(SyntheticImages(50, (3, 16, 16)), fmt, out)
    assert leftovers(out) == [] and len(open_dataset(out)) == 50


@pytest.mark.parametrize("fmt", ["lmdb", "memmap"])
def test_killed_rewrite_keeps_the_previous_complete_output(fmt, tmp_path):
    out = tmp_path / "data"
    before = pack(SyntheticImages(200, (3, 16, 16), seed=1), fmt, out)
    start_and_kill(fmt, out)
    ds = open_dataset(out)
    assert len(ds) == 200 and ds.manifest.checksum == before["checksum"]
    ds.verify()  # the old data, whole


def test_exception_mid_write_leaves_no_trace(tmp_path):
    from hpclab.progress import Cancelled, Progress

    progress = Progress()

    def cancel_midway(done, total):
        if done >= 500:
            progress.cancel()
        progress.update(done, total)

    with pytest.raises(Cancelled):
        pack(SyntheticImages(2000, (3, 8, 8)), "lmdb", tmp_path / "out", progress=cancel_midway)
    assert list(tmp_path.iterdir()) == []
