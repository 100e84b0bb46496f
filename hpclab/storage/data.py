"""Sample sources: what gets packed into each format (chapter 04).

Every source is map-style with ``len(src)``, ``src.shape`` (C, H, W) and
``src.sample(i) -> (uint8 array [C, H, W], label)``; stored datasets have the same ``sample``,
so any format converts to any other. No downloads:

- :class:`SyntheticImages`: image-like samples, deterministic per index, any size from CIFAR-like
  3x32x32 to ImageNet-like 3x224x224. Each class is a smooth (blocky) template plus a little
  noise, so PNG-style compression has something to compress, as with real photos.
- :class:`DigitsImages`: scikit-learn's 1797 real 8x8 digits as 1x8x8 uint8.
- :class:`FolderImages`: an existing class-per-folder image tree (the ImageNet/Caltech layout,
  ``root/CLASS/xxx.jpg``), resized to one shape, so a user can pack their own data.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from hpclab.storage.dataset import StorageError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm")


def parse_shape(shape: tuple[int, ...] | str) -> tuple[int, int, int]:
    if isinstance(shape, str):
        shape = tuple(int(s) for s in shape.split(","))
    if len(shape) != 3 or any(s < 1 for s in shape):
        raise StorageError(f"shape={shape!r} must be C,H,W with positive sizes, e.g. 3,32,32")
    return tuple(int(s) for s in shape)  # type: ignore[return-value]


class SyntheticImages:
    """``n`` image-like uint8 samples; sample ``i`` is the same for the same ``seed``."""

    def __init__(
        self,
        n: int,
        shape: tuple[int, int, int] = (3, 32, 32),
        classes: int = 10,
        noise: int = 12,
        seed: int = 0,
    ) -> None:
        self.n, self.shape, self.classes, self.noise, self.seed = (
            n,
            parse_shape(shape),
            classes,
            noise,
            seed,
        )
        c, h, w = self.shape
        rng = np.random.default_rng(seed)
        # Templates: 4x4-pixel blocks of random colour (smooth at the pixel level -> compressible).
        block = 4
        low = rng.integers(0, 256, (classes, c, -(-h // block), -(-w // block)), dtype=np.int16)
        self.templates = low.repeat(block, 2).repeat(block, 3)[:, :, :h, :w]
        self.labels = rng.integers(0, classes, n)

    def __len__(self) -> int:
        return self.n

    def sample(self, i: int) -> tuple[np.ndarray, int]:
        label = int(self.labels[i])
        rng = np.random.default_rng((self.seed, i))
        noise = rng.integers(-self.noise, self.noise + 1, self.shape, dtype=np.int16)
        return np.clip(self.templates[label] + noise, 0, 255).astype(np.uint8), label


class DigitsImages:
    """scikit-learn's bundled digits (1797 real images), as uint8 1x8x8 (pixel 0..16 x 15)."""

    def __init__(self) -> None:
        from sklearn.datasets import load_digits

        d = load_digits()
        self.images = (d.images * 15).astype(np.uint8)[:, None]  # [1797, 1, 8, 8]
        self.labels = d.target.astype(np.int64)
        self.shape = (1, 8, 8)

    def __len__(self) -> int:
        return len(self.labels)

    def sample(self, i: int) -> tuple[np.ndarray, int]:
        return self.images[i], int(self.labels[i])


class FolderImages:
    """A class-per-folder image tree, each image resized to ``shape`` (labels: sorted folders)."""

    def __init__(self, root: str | os.PathLike, shape: tuple[int, int, int] = (3, 32, 32)) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise StorageError(f"path={str(self.root)!r} is not a directory of class folders")
        self.shape = parse_shape(shape)
        if self.shape[0] not in (1, 3):
            raise StorageError(f"shape={self.shape}: image folders give 1 or 3 channels")
        self.classes = sorted(p.name for p in self.root.iterdir() if p.is_dir())
        self.files: list[tuple[Path, int]] = []
        for label, name in enumerate(self.classes):
            for p in sorted((self.root / name).iterdir()):
                if p.suffix.lower() in IMAGE_SUFFIXES:
                    self.files.append((p, label))
        if not self.files:
            raise StorageError(f"{self.root}: no images found in class folders (ROOT/CLASS/*.png)")

    def __len__(self) -> int:
        return len(self.files)

    def sample(self, i: int) -> tuple[np.ndarray, int]:
        from PIL import Image, UnidentifiedImageError

        path, label = self.files[i]
        c, h, w = self.shape
        try:
            with Image.open(path) as im:
                im = im.convert("L" if c == 1 else "RGB").resize((w, h))
                arr = np.asarray(im, dtype=np.uint8)
        except (OSError, UnidentifiedImageError) as err:
            raise StorageError(f"{path}: cannot be read as an image ({err})") from None
        return (arr[None] if c == 1 else arr.transpose(2, 0, 1)).copy(), label


def make_source(
    kind: str, samples: int, shape: tuple[int, int, int], seed: int = 0, path: str = ""
):
    """``synthetic`` | ``digits`` | ``folder`` (an image tree at ``path``) | a stored dataset path."""
    if kind == "synthetic":
        return SyntheticImages(samples, shape, seed=seed)
    if kind == "digits":
        return DigitsImages()
    if kind == "folder":
        return FolderImages(path, shape)
    raise StorageError(f"source={kind!r}; allowed: synthetic, digits, folder, stored")


class ArraySource:
    """Samples already in memory (``x [N, C, H, W]`` uint8, ``y [N]``): packing then measures
    the writer alone, not the generator."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        if x.ndim != 4 or x.dtype != np.uint8 or len(x) != len(y):
            raise StorageError(
                f"ArraySource needs x [N, C, H, W] uint8 and y [N]; got {x.shape} {x.dtype}, {len(y)} labels"
            )
        self.x, self.y, self.shape = x, y, tuple(x.shape[1:])

    @classmethod
    def from_source(cls, source) -> ArraySource:
        n = len(source)
        x = np.empty((n, *source.shape), np.uint8)
        y = np.empty(n, np.int64)
        for i in range(n):
            x[i], y[i] = source.sample(i)
        return cls(x, y)

    def __len__(self) -> int:
        return len(self.y)

    def sample(self, i: int) -> tuple[np.ndarray, int]:
        return self.x[i], int(self.y[i])
