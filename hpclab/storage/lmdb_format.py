"""LMDB: one memory-mapped B-tree file, many samples per transaction (chapter 04).

LMDB is what Caffe used for ImageNet; seed 002 measured it ~8x faster than image files at every
batch size. Writing: one transaction per ``chunk`` samples (one per sample is slow: each commit
syncs; one for everything holds all dirty pages), the map size computed from the data with
headroom and doubled when LMDB says it is full. Reading: read-only, ``lock=False`` (no lock file
writes, so many readers on a shared filesystem are fine), opened lazily in each process.

Record layout: key ``b"%08d" % i`` (sorted keys = index order, so a cursor walks sequentially),
value = label (int64, little endian) + the sample's raw bytes.

py-lmdb refuses to open one environment twice in a process ("already open"), and a notebook
re-runs cells: readers in one process therefore share one environment per path, kept in
``_ENVS`` keyed by (pid, path, inode, readahead) so a re-packed path is reopened, never a stale map.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from hpclab.storage.base import Checksum, StorageError, StoredDataset, iter_samples

LABEL_BYTES = 8
_ENVS: dict[tuple[int, str, int], Any] = {}


def key(i: int) -> bytes:
    return b"%08d" % i


def encode(x: np.ndarray, label: int) -> bytes:
    return int(label).to_bytes(LABEL_BYTES, "little", signed=True) + x.tobytes()


def files_for(samples: int) -> int:
    return 3  # data.mdb, lock.mdb, manifest.json


def write(
    out: Path, source: Any, shape: tuple, checksum: Checksum, progress=None, chunk: int = 1000
) -> dict:
    import lmdb

    sample_bytes = int(np.prod(shape))
    # Data + ~50% for B-tree pages and overflow-page rounding, at least 16 MiB.
    map_size = max(16 << 20, int(len(source) * (sample_bytes + 64) * 1.5))
    env = lmdb.open(str(out), map_size=map_size, subdir=True, meminit=False, sync=False)
    try:
        batch: list[tuple[bytes, bytes]] = []

        def commit() -> None:
            nonlocal map_size
            while True:
                try:
                    with env.begin(write=True) as txn:
                        for k, v in batch:
                            txn.put(k, v, append=True)  # keys arrive sorted: append is O(1)
                    break
                except lmdb.MapFullError:
                    map_size *= 2
                    env.set_mapsize(map_size)
            batch.clear()

        for i, x, label in iter_samples(source, shape, checksum, progress):
            batch.append((key(i), encode(x, label)))
            if len(batch) >= chunk:
                commit()
        if batch:
            commit()
        env.sync(True)
    except lmdb.Error as err:
        raise OSError(getattr(err, "errno", None) or 0, str(err)) from err
    finally:
        env.close()
    return {"chunk": chunk, "map_size": map_size}


def open_env(path: Path, readahead: bool = False) -> Any:
    """The process's read-only environment for ``path`` (shared: py-lmdb allows one per path)."""
    import lmdb

    data = path / "data.mdb"
    if not data.is_file():
        raise StorageError(f"{data}: missing; {path} is not a complete LMDB dataset")
    ident = (os.getpid(), str(path.resolve()), data.stat().st_ino, readahead)
    for k in [k for k in _ENVS if k[0] != ident[0]]:
        # Inherited through fork (a DataLoader worker): never use it, and close it so py-lmdb
        # lets this process open its own. With lock=False closing only unmaps in this process.
        _ENVS.pop(k).close()
    env = _ENVS.get(ident)
    if env is None:
        for k in [k for k in _ENVS if k[:2] == ident[:2]]:
            _ENVS.pop(k).close()  # re-packed, or other readahead: one env per path allowed
        try:
            # readahead=False: random reads of small records should not pull in 128 KiB each.
            env = lmdb.open(
                str(path),
                readonly=True,
                lock=False,
                readahead=readahead,
                meminit=False,
                max_readers=1024,
            )
        except lmdb.Error as err:
            raise StorageError(f"{data}: not a valid LMDB file ({err})") from None
        _ENVS[ident] = env
    return env


def forget(path: Path) -> None:
    """Close this process's shared environment for ``path`` (before it is renamed or deleted)."""
    resolved = str(Path(path).resolve())
    for k in [k for k in _ENVS if k[0] == os.getpid() and k[1] == resolved]:
        _ENVS.pop(k).close()


class LMDBDataset(StoredDataset):
    """Samples from an LMDB written by :func:`write`; the environment opens lazily per process."""

    format = "lmdb"

    def __init__(self, path, readahead: bool = False) -> None:
        super().__init__(path)
        self.readahead = readahead
        self._nbytes = self.manifest.sample_bytes + LABEL_BYTES

    def _open(self) -> Any:
        env = open_env(self.path, self.readahead)
        return env, env.begin(buffers=True)  # one long read transaction: no per-item begin

    def _close(self, handle: Any) -> None:
        handle[1].abort()  # the environment stays shared in _ENVS

    def sample(self, i: int) -> tuple[np.ndarray, int]:
        value = self.handle[1].get(b"%08d" % i)
        if value is None or len(value) != self._nbytes:
            size = "missing" if value is None else f"{len(value)} bytes"
            raise StorageError(
                f"{self.path}: record {i} is {size}, expected {self._nbytes} bytes "
                f"(truncated/corrupt database or wrong shape {self.shape})"
            )
        label = int.from_bytes(value[:LABEL_BYTES], "little", signed=True)
        x = np.frombuffer(value, np.uint8, offset=LABEL_BYTES).reshape(self.shape).copy()
        return x, label
