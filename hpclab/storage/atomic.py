"""Atomic output for every writer: temporary name, verify, rename (chapter 04).

A training job that dies while writing its dataset (time limit, OOM, ``scancel``) must not leave a
half database under the final name that later *reads as valid*. Every writer therefore writes
into a hidden sibling ``.NAME.tmp-PID-XXXX``, writes the manifest last, re-reads everything and
compares the checksum, and only then renames the directory into place. A kill at any moment leaves
either the previous complete output or nothing under the final name; the leftover temporary
directory of a dead writer is removed by the next write.

Disk full, quota exceeded or a file-size limit stop the writer with one line naming the path, and
nothing is left behind. A writer refuses up front to create more files than ``max_files``
(clusters cap inodes: "more than 10^6 files in /work or /scratch" blocks new jobs, Mao 2017).
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hpclab.storage.dataset import StorageError

_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale(final: Path) -> list[Path]:
    """Remove temporary outputs of writers for ``final`` whose process is gone."""
    removed = []
    for p in final.parent.glob(f".{final.name}.*-*"):
        parts = p.name.rsplit(".", 1)[-1].split("-")
        if len(parts) >= 2 and parts[0] in ("tmp", "old") and parts[1].isdigit():
            if not _pid_alive(int(parts[1])):
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
    return removed


def check_file_limit(final: Path, files: int, max_files: int) -> None:
    """Refuse before writing anything if the output would need more than ``max_files`` files."""
    if files > max_files:
        raise StorageError(
            f"{final}: this format would create {files} files; max_files={max_files} "
            "(raise it, or pick a format that packs samples into few files: clusters cap inodes, "
            "e.g. 10^6 files per user, Mao 2017)"
        )


@contextmanager
def atomic_dir(final: str | os.PathLike, sync: bool = False) -> Iterator[Path]:
    """Yield a fresh temporary directory; on success it replaces ``final`` (rename).

    The caller writes everything (manifest last) and verifies inside the ``with`` block. On any
    exception the temporary directory is removed and ``final`` is untouched.
    """
    final = Path(final).absolute()
    if not final.parent.is_dir():
        raise StorageError(f"out={str(final)!r}: parent directory {final.parent} does not exist")
    if final.exists() and not final.is_dir():
        raise StorageError(f"out={str(final)!r} exists and is not a directory")
    remove_stale(final)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-{os.getpid()}-", dir=final.parent))
    try:
        yield tmp
        if sync:
            os.sync()  # durable across a power loss, not only a process kill
        if final.exists():
            # os.replace cannot swap non-empty directories: move the old one aside first.
            # A kill between the two renames leaves nothing under the final name, never a mix.
            old = final.with_name(f".{final.name}.old-{os.getpid()}-{tmp.name.rsplit('-', 1)[-1]}")
            os.rename(final, old)
            os.rename(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, final)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if err.errno in _FULL:
            raise StorageError(
                f"{final}: disk full or quota/size limit reached while writing "
                f"({err.strerror}); nothing was written under {final}"
            ) from None
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
