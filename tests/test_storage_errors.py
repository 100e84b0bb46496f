"""Chapter 04: bad input gives one clear line naming the file; nothing half-written survives."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from hpclab.storage import StorageError, open_dataset, pack
from hpclab.storage.data import SyntheticImages


@pytest.fixture
def src():
    return SyntheticImages(300, (3, 16, 16))


def test_missing_path_names_it(tmp_path):
    with pytest.raises(StorageError, match=str(tmp_path / "nope")):
        open_dataset(tmp_path / "nope")


def test_directory_without_manifest_is_refused(tmp_path):
    with pytest.raises(StorageError, match="no manifest"):
        open_dataset(tmp_path)


@pytest.mark.parametrize(
    ("fmt", "victim"), [("lmdb", "data.mdb"), ("hdf5", "data.h5"), ("memmap", "x.npy")]
)
def test_truncated_file_is_named(fmt, victim, src, tmp_path):
    pack(src, fmt, tmp_path / fmt)
    f = tmp_path / fmt / victim
    os.truncate(f, f.stat().st_size // 2)
    with pytest.raises(StorageError, match=victim):
        open_dataset(tmp_path / fmt)[0]


def test_corrupt_hdf5_header_is_named(src, tmp_path):
    pack(src, "hdf5", tmp_path / "h")
    f = tmp_path / "h" / "data.h5"
    with open(f, "r+b") as fh:
        fh.write(b"\0" * 512)  # same size, header destroyed
    with pytest.raises(StorageError, match="data.h5.*not a valid HDF5"):
        open_dataset(tmp_path / "h")[0]


def test_flipped_bytes_fail_verification(src, tmp_path):
    pack(src, "memmap", tmp_path / "m")
    f = tmp_path / "m" / "x.npy"
    data = bytearray(f.read_bytes())
    data[-100] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(StorageError, match="checksum mismatch"):
        open_dataset(tmp_path / "m").verify()


def test_a_missing_sample_file_is_named(src, tmp_path):
    pack(src, "files-npy", tmp_path / "f")
    victim = tmp_path / "f" / "samples" / "0000" / "00000007.npy"
    victim.unlink()
    with pytest.raises(StorageError, match="00000007.npy"):
        open_dataset(tmp_path / "f")[7]


class WrongShapeAt:
    """A source whose sample 150 has the wrong shape (a resized image slipped in)."""

    shape = (3, 16, 16)

    def __len__(self):
        return 300

    def sample(self, i):
        x = np.zeros((3, 16, 15) if i == 150 else self.shape, np.uint8)
        return x, 0


@pytest.mark.parametrize("fmt", ["lmdb", "files-npy", "hdf5"])
def test_wrong_sample_shape_is_refused_and_nothing_is_left(fmt, tmp_path):
    with pytest.raises(StorageError, match=r"sample 150 has shape \(3, 16, 15\)"):
        pack(WrongShapeAt(), fmt, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_manifest_with_wrong_shape_is_caught_on_read(src, tmp_path):
    pack(src, "lmdb", tmp_path / "l")
    m = tmp_path / "l" / "manifest.json"
    m.write_text(m.read_text().replace("16,\n  16", "16,\n  8"))
    with pytest.raises(StorageError, match="expected"):
        open_dataset(tmp_path / "l")[0]


def test_file_limit_refuses_before_writing(src, tmp_path):
    with pytest.raises(StorageError, match="max_files=100"):
        pack(src, "files-npy", tmp_path / "f", max_files=100)
    assert list(tmp_path.iterdir()) == []
    assert pack(src, "lmdb", tmp_path / "l", max_files=100)["files"] <= 3


def test_full_disk_stops_the_writer_with_no_output(tmp_path):
    # A real size limit (RLIMIT_FSIZE) makes write() fail with EFBIG, as a full disk fails with
    # ENOSPC; both must stop the writer with one line and leave nothing under the final name.
    code = f"""
import resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
from hpclab.storage import pack
from hpclab.storage.data import SyntheticImages
pack(SyntheticImages(400, (3, 32, 32)), "memmap", {str(tmp_path / "out")!r})
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "disk full or quota/size limit" in proc.stderr and str(tmp_path / "out") in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_cli_bad_format_is_one_line_exit_2():
    proc = subprocess.run(
        [sys.executable, "-m", "hpclab.cli", "run", "pack", "--format", "zip"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "format='zip'" in proc.stderr and "lmdb" in proc.stderr


def test_cli_missing_path_is_one_line_exit_1(tmp_path):
    # Missing data is not a bad argument (exit 2): the run failed, naming the path (exit 1).
    proc = subprocess.run(
        [sys.executable, "-m", "hpclab.cli", "run", "storage-read", "--path", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        proc.returncode == 1 and proc.stderr.count("\n") == 1 and str(tmp_path / "x") in proc.stderr
    )
