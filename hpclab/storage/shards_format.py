"""Tar shards read sequentially, WebDataset-style (chapter 04).

"Small files should be moved to /tmp in a tar format" (Mao 2017): a tar is one file, so one
metadata operation, then a long sequential read that a parallel filesystem serves at full
bandwidth. Each shard ``shard-SSSSSS.tar`` holds ``per_shard`` samples as members
``IIIIIIII.raw`` (the sample's bytes) and ``IIIIIIII.cls`` (the label as text), in order.

Two readers:
- :class:`ShardStream`, an ``IterableDataset`` that streams whole shards in order, shards split
  across DataLoader workers (the way sharded data is meant to be read);
- :class:`ShardsDataset`, map-style random access through ``index.npy`` (shard, offset, label
  per sample), so the shards fit the common interface and the random-read experiment.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from hpclab.storage.dataset import (
    Checksum,
    StorageError,
    StoredDataset,
    iter_samples,
    read_manifest,
)


def shard_name(s: int) -> str:
    return f"shard-{s:06d}.tar"


def files_for(samples: int, per_shard: int = 1000) -> int:
    return -(-samples // per_shard) + 2  # + index.npy + manifest.json


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> int:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
    return tar.offset - tarfile.BLOCKSIZE * -(-len(data) // tarfile.BLOCKSIZE)  # data offset


def write(
    out: Path, source: Any, shape: tuple, checksum: Checksum, progress=None, per_shard: int = 1000
) -> dict:
    n = len(source)
    index = np.empty((n, 3), np.int64)  # shard, byte offset of the .raw data, label
    tar = None
    try:
        for i, x, label in iter_samples(source, shape, checksum, progress):
            s = i // per_shard
            if i % per_shard == 0:
                if tar is not None:
                    tar.close()
                tar = tarfile.open(out / shard_name(s), "w", format=tarfile.USTAR_FORMAT)
            offset = _add(tar, f"{i:08d}.raw", x.tobytes())
            _add(tar, f"{i:08d}.cls", str(label).encode())
            index[i] = (s, offset, label)
    finally:
        if tar is not None:
            tar.close()
    np.save(out / "index.npy", index)
    return {"per_shard": per_shard, "shards": -(-n // per_shard)}


def iter_shard(path: Path, shape: tuple, sample_bytes: int):
    """Stream one shard in order: yields (x uint8 [shape], label). Errors name the shard."""
    try:
        with tarfile.open(path, "r|") as tar:  # "r|": pure sequential stream, no seeking
            x = None
            for member in tar:
                data = tar.extractfile(member).read()
                if member.name.endswith(".raw"):
                    if len(data) != sample_bytes:
                        raise StorageError(
                            f"{path}: {member.name} has {len(data)} bytes, expected {sample_bytes}"
                        )
                    x = np.frombuffer(data, np.uint8).reshape(shape).copy()
                elif member.name.endswith(".cls") and x is not None:
                    yield x, int(data)
                    x = None
    except (tarfile.TarError, OSError, ValueError) as err:
        raise StorageError(f"{path}: corrupt or truncated shard ({err})") from None


class ShardStream(IterableDataset):
    """Sequential reader over all shards.

    Shard ``s`` goes to DataLoader worker ``s % num_workers``, so each sample is read once.
    """

    def __init__(self, path) -> None:
        self.path = Path(path)
        self.manifest = read_manifest(self.path)
        if self.manifest.format != "shards":
            raise StorageError(f"{self.path}: holds {self.manifest.format!r}, not shards")
        self.shape = self.manifest.shape
        self.shards = [self.path / shard_name(s) for s in range(self.manifest.options["shards"])]

    def __len__(self) -> int:
        return self.manifest.samples

    def __iter__(self):
        info = get_worker_info()
        wid, nw = (info.id, info.num_workers) if info is not None else (0, 1)
        for s, shard in enumerate(self.shards):
            if s % nw == wid:
                for x, label in iter_shard(shard, self.shape, self.manifest.sample_bytes):
                    yield torch.from_numpy(x), label


class ShardsDataset(StoredDataset):
    """Random access into the shards through ``index.npy`` (files open lazily per process)."""

    format = "shards"

    def _open(self) -> Any:
        try:
            index = np.load(self.path / "index.npy")
        except (OSError, ValueError) as err:
            raise StorageError(f"{self.path / 'index.npy'}: unreadable ({err})") from None
        return index, {}

    def _close(self, handle: Any) -> None:
        for f in handle[1].values():
            f.close()

    def sample(self, i: int) -> tuple[np.ndarray, int]:
        index, files = self.handle
        s, offset, label = (int(v) for v in index[i])
        f = files.get(s)
        if f is None:
            p = self.path / shard_name(s)
            try:
                f = files[s] = open(p, "rb")  # noqa: SIM115 - kept open for later samples
            except FileNotFoundError:
                raise StorageError(f"{p}: missing shard (sample {i})") from None
        f.seek(offset)
        return self.decode(f.read(self.manifest.sample_bytes)), label
