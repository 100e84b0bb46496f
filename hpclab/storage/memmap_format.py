"""One memory-mapped array: ``x.npy [N, C, H, W]`` + ``y.npy [N]`` (chapter 04).

The simplest fast format: a sample is a slice of one file, the page cache does the rest.
``numpy.load(mmap_mode="r")`` maps it lazily in each process (a map is not picklable).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from hpclab.storage.dataset import Checksum, StorageError, StoredDataset, iter_samples


def files_for(samples: int) -> int:
    return 3


def write(out: Path, source: Any, shape: tuple, checksum: Checksum, progress=None) -> dict:
    n = len(source)
    xs = np.lib.format.open_memmap(out / "x.npy", mode="w+", dtype=np.uint8, shape=(n, *shape))
    labels = np.empty(n, np.int64)
    for i, x, label in iter_samples(source, shape, checksum, progress):
        xs[i] = x
        labels[i] = label
    xs.flush()
    del xs
    np.save(out / "y.npy", labels)
    return {}


class MemmapDataset(StoredDataset):
    format = "memmap"

    def _open(self) -> Any:
        try:
            x = np.load(self.path / "x.npy", mmap_mode="r")
            y = np.load(self.path / "y.npy")
        except (OSError, ValueError) as err:  # ValueError: file shorter than its header says
            raise StorageError(f"{self.path}: x.npy/y.npy unreadable ({err})") from None
        if x.shape != (len(self), *self.shape) or x.dtype != np.uint8:
            raise StorageError(
                f"{self.path / 'x.npy'}: shape {x.shape}, manifest says {len(self)} x {self.shape}"
            )
        return x, y

    def _close(self, handle: Any) -> None:
        pass  # the map closes when the array is collected

    def sample(self, i: int) -> tuple[np.ndarray, int]:
        x, y = self.handle
        return np.array(x[i]), int(y[i])
