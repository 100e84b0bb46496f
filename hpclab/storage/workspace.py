"""Where the chapter writes its datasets, and reusing what it already packed (chapter 04).

``$HPCLAB_DATA`` if set, else node-local scratch: ``$SLURM_TMPDIR`` (set by many Slurm sites),
``$TMPDIR``, then ``/tmp``; always under a per-user ``hpclab-<user>/`` so two students on one
node do not collide. A packed dataset is reused when its manifest matches (format, samples,
shape, seed): packing is verified and atomic, so a manifest means complete data.
"""

from __future__ import annotations

import getpass
import os
import tempfile
from pathlib import Path
from typing import Any

from hpclab.storage.dataset import StorageError, read_manifest


def data_root() -> Path:
    base = os.environ.get("HPCLAB_DATA")
    if base:
        root = Path(base).expanduser()
    else:
        local = os.environ.get("SLURM_TMPDIR") or os.environ.get("TMPDIR") or tempfile.gettempdir()
        try:
            user = getpass.getuser()
        except Exception:  # noqa: BLE001 - containers without a passwd entry
            user = str(os.getuid())
        root = Path(local) / f"hpclab-{user}" / "storage"
    root.mkdir(parents=True, exist_ok=True)
    return root


def dataset_path(
    fmt: str, samples: int, shape: tuple, seed: int = 0, root: Path | None = None
) -> Path:
    c, h, w = shape
    return (root or data_root()) / f"synthetic-{samples}-{c}x{h}x{w}-s{seed}" / fmt


def prepared(
    fmt: str, samples: int, shape: tuple, seed: int = 0, progress=None, **opts: Any
) -> Path:
    """Path of a synthetic dataset in ``fmt``: reused if already packed, packed otherwise."""
    from hpclab.storage.data import SyntheticImages
    from hpclab.storage.pack import pack

    path = dataset_path(fmt, samples, tuple(shape), seed)
    if path.is_dir():
        try:
            m = read_manifest(path)
            if (m.format, m.samples, tuple(m.shape)) == (fmt, samples, tuple(shape)):
                return path
        except StorageError:
            pass  # a broken leftover: pack again (atomically replaces it)
    path.parent.mkdir(parents=True, exist_ok=True)
    pack(SyntheticImages(samples, tuple(shape), seed=seed), fmt, path, progress=progress, **opts)
    return path


def resolve(path: str, fmt: str, samples: int, shape: tuple, seed: int = 0, progress=None) -> Path:
    """A user's ``path`` (must exist) or the prepared synthetic dataset for ``fmt``."""
    if path:
        p = Path(path).expanduser()
        read_manifest(p)  # a clear error if missing or not a dataset
        return p
    return prepared(fmt, samples, shape, seed, progress=progress)
