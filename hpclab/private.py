"""Private by default: directories that hold a student's data are 0700, files 0600.

A cluster's login and compute nodes are shared with other users, and ``/tmp`` with them; the
default umask (022) would leave every job directory, result store, data cache and profile
readable by all of them. Every directory the library creates for a student's data goes through
:func:`private_dir`; the files inside are then out of others' reach whatever their own mode,
and :func:`private_file` makes a file 0600 as well where it may be copied out of its directory.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: str | os.PathLike) -> Path:
    """Create ``path`` (and any missing parents) as 0700 and return it.

    Only directories created here are given the mode, and the leaf when it is ours: a shared
    parent that exists already (``/tmp``, a project space) is left as it is.
    """
    path = Path(path).expanduser()
    missing = []
    p = path
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process made it meanwhile
            d.mkdir(mode=DIR_MODE)
        _own_chmod(d, DIR_MODE)  # mkdir's mode is masked by the umask
    if path.is_dir():
        _own_chmod(path, DIR_MODE)
    return path


def private_file(path: str | os.PathLike) -> Path:
    """Make an existing file ours alone (0600)."""
    path = Path(path)
    _own_chmod(path, FILE_MODE)
    return path


def _own_chmod(path: Path, mode: int) -> None:
    with contextlib.suppress(OSError):
        if path.stat().st_uid == os.getuid():
            path.chmod(mode)
