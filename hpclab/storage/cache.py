"""Warm and cold reads: the page cache, and how to empty it for one dataset (chapter 04).

A second read of the same file comes from RAM (the page cache), so "my loader reads at 400k
samples/s" is often a statement about memory, not the disk. A *cold* read needs the dataset's
pages out of the cache. ``drop_caches`` needs root and empties the whole node's cache (everyone's,
on a shared node); ``posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)`` evicts one file's clean pages
as an ordinary user (DESIGN.md, measured facts). It cannot evict files on tmpfs (``/dev/shm``:
they *are* memory), dirty pages (so :func:`evict` flushes first) or pages that a process still
maps (close LMDB environments and memmaps first: the readers' ``close()`` does). On a network
file system (Lustre, NFS) it drops only this client's cache: the servers' caches stay warm.

:func:`resident_fraction` asks the kernel (``mincore``) which pages are in memory, so the
experiment can say whether "cold" really was cold.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from pathlib import Path

from hpclab.measure.libc import libc as typed_libc


def _files(path: str | os.PathLike) -> list[Path]:
    path = Path(path)
    return [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())


def evict(path: str | os.PathLike) -> int:
    """Drop the page-cache pages of every file under ``path``; returns the number of files.

    Needs no root. Returns 0 on systems without ``posix_fadvise`` (macOS): reads stay warm.
    """
    if not hasattr(os, "posix_fadvise"):
        return 0
    count = 0
    # Dirty pages cannot be dropped and a fresh writer may leave some: flush once (one sync,
    # not one fdatasync per file: 20 000 flushes of tiny files take minutes on a busy disk).
    os.sync()
    for p in _files(path):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            count += 1
        finally:
            os.close(fd)
    return count


def _libc():
    try:
        lib = typed_libc()
    except OSError:
        return None
    if not hasattr(lib, "mincore"):
        return None
    lib.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte))
    lib.mincore.restype = ctypes.c_int
    return lib


def resident_fraction(path: str | os.PathLike) -> float | None:
    """Fraction of the pages under ``path`` that sit in the page cache now (``mincore``).

    Mapping a file does not read it, so asking does not warm it. ``None`` where the kernel
    cannot be asked (no ``mincore``).
    """
    lib = _libc()
    if lib is None:
        return None
    page = mmap.PAGESIZE
    total = resident = 0
    for p in _files(path):
        size = p.stat().st_size
        if size == 0:
            continue
        pages = -(-size // page)
        fd = os.open(p, os.O_RDONLY)
        try:
            addr = lib.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                return None
            try:
                vec = (ctypes.c_ubyte * pages)()
                if lib.mincore(addr, size, vec) != 0:
                    return None
                resident += sum(b & 1 for b in bytes(vec))  # bit 0: page is resident
            finally:
                lib.munmap(addr, size)
        finally:
            os.close(fd)
        total += pages
    return resident / total if total else 0.0
