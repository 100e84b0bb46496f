"""Chapter 04: posix_fadvise(DONTNEED) really empties the page cache for one dataset, no root."""

from __future__ import annotations

import os

import pytest

from hpclab.storage import open_dataset, pack
from hpclab.storage.cache import evict, resident_fraction
from hpclab.storage.data import SyntheticImages


def _on_tmpfs(path) -> bool:
    best, fstype = "", ""
    with open("/proc/mounts") as f:
        for line in f:
            _, mnt, kind, *_ = line.split()
            if str(path).startswith(mnt) and len(mnt) > len(best):
                best, fstype = mnt, kind
    return fstype in ("tmpfs", "ramfs")


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise on this OS")
@pytest.mark.parametrize("fmt", ["lmdb", "files-npy"])
def test_evict_then_read_warms_again(fmt, tmp_path):
    if _on_tmpfs(tmp_path):
        pytest.skip("tmpfs pages are the files themselves: they cannot be evicted")
    pack(SyntheticImages(400, (3, 32, 32)), fmt, tmp_path / "d")
    assert evict(tmp_path / "d") >= 3
    assert resident_fraction(tmp_path / "d") < 0.05
    ds = open_dataset(tmp_path / "d")
    for i in range(len(ds)):
        ds[i]
    assert resident_fraction(tmp_path / "d") > 0.9
