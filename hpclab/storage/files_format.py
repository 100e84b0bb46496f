"""One file per sample, as raw ``.npy`` or as ``.png`` (chapter 04).

The layout most datasets arrive in (ImageNet: 1.28 M JPEGs) and the slowest to read: every
sample costs an ``open``, a ``stat`` and a ``close`` (metadata operations that a parallel
filesystem sends to its metadata server) before a few KB of data. Fox et al. 2015 measured image files
~8-12x slower than LMDB in Caffe; Mao 2017 adds the quota: more than 10^6 files blocks new jobs.

Layout: ``samples/KKKK/IIIIIIII.npy`` (1000 files per sub-directory: huge flat directories are
slow to list on every filesystem) and ``labels.npy``. PNG needs 1 or 3 channels.

``open_latency_ms`` adds a sleep before each open: a **simulated** shared-filesystem metadata
latency (Lustre/NFS), so the lesson shows on a laptop's SSD too.
"""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

import numpy as np

from hpclab.storage.dataset import Checksum, StorageError, StoredDataset, iter_samples

PER_DIR = 1000


def rel_path(i: int, ext: str) -> str:
    return f"samples/{i // PER_DIR:04d}/{i:08d}.{ext}"


def files_for(samples: int) -> int:
    return samples + 2  # + labels.npy + manifest.json


def encode_png(x: np.ndarray, compress_level: int = 6) -> bytes:
    from PIL import Image

    c = x.shape[0]
    if c not in (1, 3):
        raise StorageError(f"files-png needs 1 or 3 channels, the samples have shape {x.shape}")
    img = Image.fromarray(x[0] if c == 1 else x.transpose(1, 2, 0))
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=compress_level)
    return buf.getvalue()


def write(
    out: Path,
    source: Any,
    shape: tuple,
    checksum: Checksum,
    progress=None,
    encoding: str = "npy",
    compress_level: int = 6,
) -> dict:
    if encoding == "png" and shape[0] not in (1, 3):
        raise StorageError(f"files-png needs 1 or 3 channels, shape={tuple(shape)}")
    n = len(source)
    labels = np.empty(n, np.int64)
    for i, x, label in iter_samples(source, shape, checksum, progress):
        p = out / rel_path(i, encoding)
        if i % PER_DIR == 0:
            p.parent.mkdir(parents=True, exist_ok=True)
        if encoding == "npy":
            np.save(p, x)
        else:
            p.write_bytes(encode_png(x, compress_level))
        labels[i] = label
    np.save(out / "labels.npy", labels)
    return {"encoding": encoding}


class FilesDataset(StoredDataset):
    """One file per sample; ``format`` is ``files-npy`` or ``files-png``."""

    def __init__(self, path, open_latency_ms: float = 0.0) -> None:
        from hpclab.storage.dataset import read_manifest

        self.format = read_manifest(path).format  # before the base class checks it
        if self.format not in ("files-npy", "files-png"):
            raise StorageError(f"{path}: holds {self.format!r}, not one file per sample")
        super().__init__(path)
        self.ext = self.format.split("-")[1]
        self.open_latency_s = open_latency_ms / 1e3

    def _open(self) -> Any:
        labels = self.path / "labels.npy"
        try:
            return np.load(labels)
        except (OSError, ValueError) as err:
            raise StorageError(f"{labels}: unreadable ({err})") from None

    def _close(self, handle: Any) -> None:
        pass

    def sample(self, i: int) -> tuple[np.ndarray, int]:
        labels = self.handle
        p = self.path / rel_path(i, self.ext)
        if self.open_latency_s:
            time.sleep(self.open_latency_s)  # simulated metadata-server round trip
        try:
            if self.ext == "npy":
                x = np.load(p)
            else:
                from PIL import Image

                with Image.open(p) as im:
                    x = np.asarray(im)
                x = x[None] if x.ndim == 2 else x.transpose(2, 0, 1)
        except FileNotFoundError:
            raise StorageError(f"{p}: missing (sample {i} of {len(self)})") from None
        except (OSError, ValueError) as err:
            raise StorageError(f"{p}: corrupt ({err})") from None
        return self.check_shape(np.ascontiguousarray(x), p), int(labels[i])
