"""Where the chapter writes its datasets, and reusing what it already packed (chapter 04).

``$HPCLAB_DATA`` if set, else node-local scratch: ``$SLURM_TMPDIR`` (set by many Slurm sites),
``$TMPDIR``, then ``/tmp``; always under a per-user ``hpclab-<user>/`` so two students on one
node do not collide. A packed dataset is reused when its manifest matches (format, samples,
shape, seed): packing is verified and atomic, so a manifest means complete data.

Scratch is shared with the other users of the node, so the space is bounded: where the data go
is printed once per process, datasets not used for the longest time are removed when the total
passes ``$HPCLAB_DATA_MAX_MB`` (default 1024), and :func:`clean` frees everything at the end of
the chapter.
"""

from __future__ import annotations

import getpass
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from hpclab.private import private_dir
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
    private_dir(root)
    if root not in _announced:
        _announced.add(root)
        print(
            f"hpclab: datasets go to {root} ({usage_mb(root):.0f} MB there now; kept up to "
            f"{max_mb()} MB, $HPCLAB_DATA_MAX_MB; hpclab.storage.workspace.clean() frees them)",
            file=sys.stderr,
        )
    return root


_announced: set[Path] = set()
_in_use: set[Path] = set()  # datasets this process opened: never removed under its feet


def max_mb() -> int:
    try:
        return max(0, int(os.environ.get("HPCLAB_DATA_MAX_MB", "1024")))
    except ValueError:
        return 1024


def _size(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def usage_mb(root: Path | None = None) -> float:
    """MB under the data root (every dataset and packed copy)."""
    root = root or data_root()
    return _size(root) / 1e6 if root.is_dir() else 0.0


def prune(root: Path, limit_mb: float | None = None) -> list[Path]:
    """Remove the least recently used ``synthetic-*`` datasets until ``root`` holds at most
    ``limit_mb``; datasets in use by this process stay. Returns what was removed."""
    limit = (max_mb() if limit_mb is None else limit_mb) * 1e6
    sets = [(p.stat().st_mtime, p) for p in root.glob("synthetic-*") if p.is_dir()]
    total = _size(root)
    removed = []
    for _mtime, path in sorted(sets):
        if total <= limit:
            break
        if any(u == path or path in u.parents for u in _in_use):
            continue
        size = _size(path)
        shutil.rmtree(path, ignore_errors=True)
        total -= size
        removed.append(path)
    return removed


def clean(root: Path | None = None) -> str:
    """Remove every dataset under the data root; returns one line saying how much was freed."""
    root = root or data_root()
    before = usage_mb(root)
    for child in root.iterdir():  # open LMDB maps are keyed by inode: a re-pack reopens them
        if child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink()
    _in_use.clear()
    return f"freed {before - usage_mb(root):.0f} MB in {root}"


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
                os.utime(path.parent)  # most recently used: pruned last
                _in_use.add(path)
                return path
        except StorageError:
            pass  # a broken leftover: pack again (atomically replaces it)
    private_dir(path.parent)
    pack(SyntheticImages(samples, tuple(shape), seed=seed), fmt, path, progress=progress, **opts)
    os.utime(path.parent)
    _in_use.add(path)
    prune(path.parent.parent)
    return path


def resolve(path: str, fmt: str, samples: int, shape: tuple, seed: int = 0, progress=None) -> Path:
    """A user's ``path`` (must exist) or the prepared synthetic dataset for ``fmt``."""
    if path:
        p = Path(path).expanduser()
        read_manifest(p)  # a clear error if missing or not a dataset
        return p
    return prepared(fmt, samples, shape, seed, progress=progress)
