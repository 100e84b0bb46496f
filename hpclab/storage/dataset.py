"""The one Dataset interface every storage format shares (chapter 04).

A stored dataset is a path (a directory, or for some formats a single file) plus a
``manifest.json`` beside the data that says which format it is, how many samples, their shape
and dtype, and a checksum of what the writer wrote. Readers subclass :class:`StoredDataset`:

- ``__len__`` and ``__getitem__(i) -> (x uint8 tensor [C, H, W], label int)``;
- heavy handles (LMDB environments, HDF5 files, open shards) are opened **lazily**, on the
  first ``__getitem__`` in the process that uses them, and reopened after a fork. Handles
  cannot be pickled, and a handle inherited through ``fork`` is unsafe (DESIGN.md, measured
  facts): a DataLoader worker must open its own;
- ``sample(i) -> (uint8 array, label)`` is the same call every source has, so any format
  converts to any other (:mod:`hpclab.storage.pack`).

A missing path, a corrupt file or a wrong sample shape raises :class:`StorageError` with one line
naming the file. It is not a :class:`~hpclab.config.ConfigError`: the arguments were fine, the
data are not (the CLI exits 1, not 2).
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hpclab.config import RunError

MANIFEST = "manifest.json"
FORMATS = ("lmdb", "hdf5", "files-npy", "files-png", "shards", "memmap")


class StorageError(RunError):
    """A storage problem with one line naming the file (missing, corrupt, full disk, quota)."""


@dataclass
class Manifest:
    """What a writer wrote: the reader trusts nothing else (chapter 04)."""

    format: str
    samples: int
    shape: tuple[int, ...]
    dtype: str = "uint8"
    checksum: str = ""  # CRC-32 over every (label, sample bytes) in index order
    files: int = 0  # files (inodes) the dataset occupies, manifest included
    bytes_on_disk: int = 0
    options: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        d = asdict(self)
        d["shape"] = list(self.shape)
        return json.dumps(d, indent=1)

    @property
    def sample_bytes(self) -> int:
        return int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize


def read_manifest(path: str | os.PathLike) -> Manifest:
    """The manifest of a stored dataset, or a StorageError naming what is missing or broken."""
    path = Path(path)
    if not path.exists():
        raise StorageError(f"path={str(path)!r} does not exist; pack a dataset there first")
    mpath = path / MANIFEST if path.is_dir() else path.with_name(path.name + "." + MANIFEST)
    if not mpath.is_file():
        raise StorageError(f"{mpath}: no manifest; is {path} a dataset written by hpclab pack?")
    try:
        d = json.loads(mpath.read_text())
        d["shape"] = tuple(int(s) for s in d["shape"])
        m = Manifest(**d)
    except (ValueError, TypeError, KeyError) as err:
        raise StorageError(f"{mpath}: corrupt manifest ({err})") from None
    if m.format not in FORMATS:
        raise StorageError(f"{mpath}: format={m.format!r}; allowed: {', '.join(FORMATS)}")
    return m


class Checksum:
    """CRC-32 over (label, sample bytes) in index order: equal iff the same data, same order.

    CRC-32 is what zip, gzip and PNG use to detect corruption (not tampering); it runs at
    several GB/s, so verifying costs little next to the reads it protects.
    """

    def __init__(self) -> None:
        self._crc = 0
        self._count = 0

    def add(self, label: int, data: bytes | memoryview) -> None:
        self._crc = zlib.crc32(
            data, zlib.crc32(label.to_bytes(8, "little", signed=True), self._crc)
        )
        self._count += 1

    def hexdigest(self) -> str:
        return f"crc32:{self._crc:08x}:n={self._count}"


def disk_usage(path: str | os.PathLike) -> tuple[int, int]:
    """(bytes allocated on disk, number of files) under ``path`` (a file or a directory)."""
    path = Path(path)
    paths = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_blocks * 512 for p in paths), len(paths)


# This process's id, refreshed after every fork. os.getpid() is a system call (0.4 us on a
# virtual machine, 5% of an LMDB read); a list lookup is not. The fork hook is installed on
# the first open, not at import.
_PID = [os.getpid()]
_HOOKED = [False]


def current_pid() -> int:
    return _PID[0]


def _track_forks() -> None:
    if not _HOOKED[0] and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=lambda: _PID.__setitem__(0, os.getpid()))
        _HOOKED[0] = True
    _PID[0] = os.getpid()


class StoredDataset:
    """Base class of every format's reader: map-style, a ``torch.utils.data.Dataset``.

    Subclasses implement ``_open()`` (returns the per-process handle), ``sample(i)`` and
    optionally ``_close(handle)``. ``decode(raw)`` turns a record's bytes into an array.
    """

    format = ""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.manifest = read_manifest(self.path)
        if self.manifest.format != self.format:
            raise StorageError(
                f"{self.path}: holds format {self.manifest.format!r}, not {self.format!r}"
            )
        self.shape = self.manifest.shape
        self._handle: Any = None
        self._pid: int | None = None  # the process that opened _handle

    # -- lazy per-process handle -------------------------------------------------------------
    @property
    def handle(self) -> Any:
        """The open handle for *this* process (opened on first use, reopened after fork)."""
        pid = _PID[0]
        if self._handle is None or self._pid != pid:
            _track_forks()
            pid = _PID[0]
            self._handle = None  # never close a parent's handle from a child
            self.check_sizes()
            try:
                self._handle = self._open()
            except StorageError:
                raise
            except Exception as err:  # noqa: BLE001 - one line naming the file, not a traceback
                msg = str(err).splitlines()[0] if str(err) else type(err).__name__
                raise StorageError(f"{self.path}: cannot open as {self.format} ({msg})") from None
            self._pid = pid
        return self._handle

    def check_sizes(self) -> None:
        """Compare the data files' sizes with what the writer recorded (catches truncation)."""
        for rel, size in self.manifest.options.get("file_sizes", {}).items():
            p = self.path / rel
            if not p.is_file():
                raise StorageError(f"{p}: missing ({self.format} dataset {self.path})")
            got = p.stat().st_size
            if got != size:
                raise StorageError(
                    f"{p}: {got} bytes, but the writer wrote {size} (truncated or overwritten)"
                )

    @property
    def is_open(self) -> bool:
        return self._handle is not None and self._pid == _PID[0]

    def _open(self) -> Any:
        raise NotImplementedError

    def _close(self, handle: Any) -> None:
        close = getattr(handle, "close", None)
        if close is not None:
            close()

    def close(self) -> None:
        if self.is_open:
            self._close(self._handle)
        self._handle, self._pid = None, None

    def __getstate__(self) -> dict[str, Any]:
        # Handles are not picklable: a spawned worker gets the path and opens its own.
        state = dict(self.__dict__)
        state["_handle"], state["_pid"] = None, None
        return state

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # -- records -----------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.manifest.samples

    def _index(self, i: int) -> int:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for {n} samples in {self.path}")
        return i % n

    def sample(self, i: int) -> tuple[np.ndarray, int]:
        """Record ``i`` as (uint8 array [C, H, W], label); the same call every source has."""
        raise NotImplementedError

    def decode(self, raw: bytes | memoryview) -> np.ndarray:
        """Raw bytes -> a writable uint8 array of the manifest's shape (a bad size names the file)."""
        if len(raw) != self.manifest.sample_bytes:
            raise StorageError(
                f"{self.path}: a record has {len(raw)} bytes, expected "
                f"{self.manifest.sample_bytes} for shape {self.shape} (corrupt or wrong shape)"
            )
        return np.frombuffer(raw, dtype=self.manifest.dtype).reshape(self.shape).copy()

    def check_shape(self, x: np.ndarray, where: object) -> np.ndarray:
        if x.shape != self.shape:
            raise StorageError(f"{where}: sample has shape {x.shape}, expected {self.shape}")
        return x

    def __getitem__(self, i: int):
        import torch

        x, label = self.sample(self._index(int(i)))
        return torch.from_numpy(x), label

    def checksum(self) -> str:
        """Recompute the manifest's checksum from what is stored now (reads everything)."""
        c = Checksum()
        for i in range(len(self)):
            x, label = self.sample(i)
            c.add(label, np.ascontiguousarray(x).data)
        return c.hexdigest()

    def verify(self) -> None:
        """Raise StorageError if the stored data no longer match the manifest's checksum."""
        got = self.checksum()
        if got != self.manifest.checksum:
            raise StorageError(
                f"{self.path}: checksum mismatch (stored {self.manifest.checksum[:12]}..., "
                f"read {got[:12]}...): the data are corrupt or were changed"
            )

    def __repr__(self) -> str:
        m = self.manifest
        return f"{type(self).__name__}({str(self.path)!r}, samples={m.samples}, shape={m.shape})"


def iter_samples(source: Any, shape: tuple[int, ...], checksum: Checksum, progress=None):
    """Yield ``(i, x, label)`` from ``source`` with shape/dtype checked and the checksum updated.

    ``progress(done, total)`` is called every 500 samples (it may raise ``Cancelled``).
    """
    n = len(source)
    shape = tuple(shape)
    for i in range(n):
        x, label = source.sample(i)
        if not isinstance(x, np.ndarray):
            x = np.asarray(x)
        if x.shape != shape or x.dtype != np.uint8:
            raise StorageError(
                f"{getattr(source, 'path', type(source).__name__)}: sample {i} has shape "
                f"{x.shape} dtype {x.dtype}; expected {tuple(shape)} uint8"
            )
        if not x.flags.c_contiguous:
            x = np.ascontiguousarray(x)
        label = int(label)
        checksum.add(label, x.data)
        if progress is not None and i % 500 == 0:
            progress(i, n)
        yield i, x, label
