"""LMDB: one memory-mapped B-tree file, many samples per transaction (chapter 04).

LMDB is what Caffe used for ImageNet; Fox et al. 2015 measured it ~8x faster than image files at every
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
import torch

from hpclab.storage.dataset import (
    Checksum,
    StorageError,
    StoredDataset,
    current_pid,
    iter_samples,
)

LABEL_BYTES = 8
_ENVS: dict[tuple, list] = {}  # ident -> [environment, users]


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
    # sync=False: one sync at the end instead of one per commit; atomicity comes from the
    # rename, not from LMDB. (Not writemap: it grows the file to the whole map size.)
    env = lmdb.open(str(out), map_size=map_size, subdir=True, meminit=False, sync=False)
    try:
        batch: list[tuple[bytes, bytes]] = []

        def commit() -> None:
            nonlocal map_size
            while True:
                try:
                    with env.begin(write=True) as txn:
                        # keys arrive sorted: append skips the B-tree search; putmulti loops in C
                        txn.cursor().putmulti(batch, append=True)
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
    """The process's read-only environment for ``path``, shared and counted (py-lmdb allows one
    per path per process). Every call must be paired with :func:`release_env`."""
    import lmdb

    data = path / "data.mdb"
    if not data.is_file():
        raise StorageError(f"{data}: missing; {path} is not a complete LMDB dataset")
    ident = (os.getpid(), str(path.resolve()), data.stat().st_ino, readahead)
    for k in [k for k in _ENVS if k[0] != ident[0]]:
        # Inherited through fork (a DataLoader worker): never use it, and close it so py-lmdb
        # lets this process open its own. With lock=False closing only unmaps in this process.
        _ENVS.pop(k)[0].close()
    entry = _ENVS.get(ident)
    if entry is None:
        for k in [k for k in _ENVS if k[:2] == ident[:2]]:
            _ENVS.pop(k)[0].close()  # re-packed, or other readahead: one env per path allowed
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
        entry = _ENVS[ident] = [env, 0]
    entry[1] += 1
    return entry[0]


def release_env(env: Any) -> None:
    """One user fewer; the last one closes the map (then its pages can leave the page cache)."""
    for k, entry in list(_ENVS.items()):
        if entry[0] is env and k[0] == os.getpid():
            entry[1] -= 1
            if entry[1] <= 0:
                del _ENVS[k]
                env.close()


def forget(path: Path) -> None:
    """Close this process's environment for ``path`` now (before it is renamed or deleted)."""
    resolved = str(Path(path).resolve())
    for k in [k for k in _ENVS if k[0] == os.getpid() and k[1] == resolved]:
        _ENVS.pop(k)[0].close()


class LMDBDataset(StoredDataset):
    """Samples from an LMDB written by :func:`write`; the environment opens lazily per process."""

    format = "lmdb"

    def __init__(self, path, readahead: bool = False) -> None:
        super().__init__(path)
        self.readahead = readahead
        self._nbytes = self.manifest.sample_bytes + LABEL_BYTES
        self._n = self.manifest.samples
        self._txn: Any = None

    def _open(self) -> Any:
        env = open_env(self.path, self.readahead)
        self._txn = env.begin(buffers=True)  # one long read transaction: no per-item begin
        return env, self._txn

    def _close(self, handle: Any) -> None:
        env, txn = handle
        txn.abort()
        self._txn = None
        release_env(env)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_txn"] = None
        return state

    def sample(self, i: int) -> tuple[np.ndarray, int]:
        txn = self._txn if self._pid == current_pid() else self.handle[1]
        value = txn.get(b"%08d" % i)
        if value is None or len(value) != self._nbytes:
            self._bad_record(i, value)
        label = int.from_bytes(value[:LABEL_BYTES], "little", signed=True)
        return np.frombuffer(value, np.uint8, offset=LABEL_BYTES).reshape(self.shape).copy(), label

    def _bad_record(self, i: int, value: Any) -> None:
        size = "missing" if value is None else f"{len(value)} bytes"
        raise StorageError(
            f"{self.path}: record {i} is {size}, expected {self._nbytes} bytes "
            f"(truncated/corrupt database or wrong shape {self.shape})"
        )

    def __getitem__(self, i: int):
        # The hot path of every epoch, kept flat (benchmarks/storage.py holds it to >= 90% of a
        # raw lmdb loop): sample() inlined, the process check is a list lookup.
        n = self._n
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"index {i} out of range for {n} samples in {self.path}")
        txn = self._txn if self._pid == current_pid() else self.handle[1]
        value = txn.get(b"%08d" % i)
        if value is None or len(value) != self._nbytes:
            self._bad_record(i, value)
        label = int.from_bytes(value[:LABEL_BYTES], "little", signed=True)
        x = np.frombuffer(value, np.uint8, offset=LABEL_BYTES).reshape(self.shape).copy()
        return torch.from_numpy(x), label
