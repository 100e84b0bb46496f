"""HDF5: one file, arrays ``x [N, C, H, W]`` and ``y [N]`` (chapter 04; Nakayama 2017 lists HDF5).

Layout matters: ``contiguous`` stores ``x`` as one block (a random sample is one seek + read);
``chunked`` stores it in chunks of ``chunk`` samples, which compression needs (gzip works per
chunk) and which makes a random read decompress a whole chunk. The file opens lazily per
process: an h5py handle cannot be pickled, and one inherited through fork is unsafe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from hpclab.config import ConfigError
from hpclab.storage.dataset import Checksum, StorageError, StoredDataset, iter_samples

FILE = "data.h5"
LAYOUTS = ("contiguous", "chunked")


def files_for(samples: int) -> int:
    return 2


def write(
    out: Path,
    source: Any,
    shape: tuple,
    checksum: Checksum,
    progress=None,
    layout: str = "contiguous",
    compression: str = "none",
    chunk: int = 64,
) -> dict:
    import h5py

    if layout not in LAYOUTS:
        raise ConfigError(f"layout={layout!r}; allowed: {', '.join(LAYOUTS)}")
    if compression != "none" and layout == "contiguous":
        raise ConfigError(
            f"compression={compression!r} needs layout='chunked' (HDF5 compresses chunks)"
        )
    n = len(source)
    kw: dict[str, Any] = {}
    if layout == "chunked":
        kw["chunks"] = (min(chunk, n), *shape)
        if compression != "none":
            kw["compression"] = compression
    with h5py.File(out / FILE, "w") as f:
        xs = f.create_dataset("x", (n, *shape), dtype=np.uint8, **kw)
        ys = f.create_dataset("y", (n,), dtype=np.int64)
        block = 1024
        buf = np.empty((block, *shape), np.uint8)
        labels = np.empty(n, np.int64)
        start = 0
        for i, x, label in iter_samples(source, shape, checksum, progress):
            buf[i - start] = x
            labels[i] = label
            if i - start + 1 == block or i == n - 1:
                xs[start : i + 1] = buf[: i - start + 1]
                start = i + 1
        ys[:] = labels
    return {
        "layout": layout,
        "compression": compression,
        "chunk": chunk if layout == "chunked" else 0,
    }


class HDF5Dataset(StoredDataset):
    format = "hdf5"

    def _open(self) -> Any:
        import h5py

        path = self.path / FILE
        if not path.is_file():
            raise StorageError(f"{path}: missing; {self.path} is not a complete HDF5 dataset")
        try:
            f = h5py.File(path, "r")
            x, y = f["x"], f["y"]
        except (OSError, KeyError) as err:
            raise StorageError(f"{path}: not a valid HDF5 dataset ({err})") from None
        if x.shape[1:] != self.shape or len(x) != len(self):
            raise StorageError(
                f"{path}: x has shape {x.shape}, manifest says {len(self)} x {self.shape}"
            )
        return f, x, y[:]  # labels are small: read once

    def sample(self, i: int) -> tuple[np.ndarray, int]:
        _, x, y = self.handle
        try:
            return x[i], int(y[i])
        except OSError as err:  # a truncated file fails here, not at open
            raise StorageError(f"{self.path / FILE}: read of sample {i} failed ({err})") from None

    def _close(self, handle: Any) -> None:
        handle[0].close()
