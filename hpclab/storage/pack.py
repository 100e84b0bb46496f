"""Pack any source into any format, atomically and verified (chapter 04; ``hpclab run pack``).

:func:`pack` = refuse too many files -> write into a temporary directory -> write the manifest
(checksum computed while writing) -> re-open with the format's reader and compare the checksum
-> rename into place. :func:`open_dataset` opens any packed path with the right reader.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from hpclab.storage import files_format, hdf5_format, lmdb_format, memmap_format, shards_format
from hpclab.storage.atomic import atomic_dir, check_file_limit
from hpclab.storage.dataset import (
    FORMATS,
    MANIFEST,
    Checksum,
    Manifest,
    StorageError,
    StoredDataset,
    disk_usage,
    read_manifest,
)

DEFAULT_MAX_FILES = 100_000
MAX_SIZED_FILES = 64


def _writer(fmt: str, opts: dict[str, Any]):
    if fmt == "lmdb":
        return lmdb_format.write, {"chunk": opts.get("chunk", 1000)}
    if fmt == "hdf5":
        keep = ("layout", "compression", "chunk")
        return hdf5_format.write, {k: opts[k] for k in keep if k in opts}
    if fmt in ("files-npy", "files-png"):
        extra = {"compress_level": opts["compress_level"]} if "compress_level" in opts else {}
        return files_format.write, {"encoding": fmt.split("-")[1], **extra}
    if fmt == "shards":
        return shards_format.write, {"per_shard": opts.get("per_shard", 1000)}
    if fmt == "memmap":
        return memmap_format.write, {}
    raise StorageError(f"format={fmt!r}; allowed: {', '.join(FORMATS)}")


def files_needed(fmt: str, samples: int, per_shard: int = 1000) -> int:
    """Files (inodes) a format needs for ``samples`` samples, counted before writing."""
    if fmt in ("files-npy", "files-png"):
        return files_format.files_for(samples)
    if fmt == "shards":
        return shards_format.files_for(samples, per_shard)
    mod = {"lmdb": lmdb_format, "hdf5": hdf5_format, "memmap": memmap_format}[fmt]
    return mod.files_for(samples)


def open_dataset(path: str | os.PathLike, **kwargs: Any) -> StoredDataset:
    """The reader for whatever format ``path`` holds (from its manifest)."""
    fmt = read_manifest(path).format
    if fmt == "lmdb":
        return lmdb_format.LMDBDataset(path, **kwargs)
    if fmt == "hdf5":
        return hdf5_format.HDF5Dataset(path)
    if fmt in ("files-npy", "files-png"):
        return files_format.FilesDataset(path, **kwargs)
    if fmt == "shards":
        return shards_format.ShardsDataset(path)
    return memmap_format.MemmapDataset(path)


def pack(
    source: Any,
    fmt: str,
    out: str | os.PathLike,
    *,
    max_files: int = DEFAULT_MAX_FILES,
    verify: bool = True,
    sync: bool = False,
    progress=None,
    **opts: Any,
) -> dict[str, Any]:
    """Write ``source`` (anything with ``len``, ``shape`` and ``sample(i)``) as ``fmt`` at ``out``.

    Returns a record: format, samples, files (inodes), bytes on disk, seconds to write and to
    verify, and the checksum. On any failure nothing changes under ``out``.
    """
    out = Path(out)
    shape = tuple(int(s) for s in source.shape)
    write, kwargs = _writer(fmt, opts)
    n = len(source)
    if n < 1:
        raise StorageError(f"{out}: the source has no samples")
    check_file_limit(out, files_needed(fmt, n, kwargs.get("per_shard", 1000)), max_files)
    checksum = Checksum()
    with atomic_dir(out, sync=sync) as tmp:
        t0 = time.perf_counter()
        options = write(tmp, source, shape, checksum, progress, **kwargs)
        manifest = Manifest(fmt, n, shape, "uint8", checksum.hexdigest(), 0, 0, options)
        (tmp / MANIFEST).write_text(manifest.to_json())  # last: a manifest means complete data
        t_write = time.perf_counter() - t0
        t_verify = _verify(tmp, fmt) if verify else 0.0
        nbytes, nfiles = _seal(tmp, manifest)
    return {
        "format": fmt,
        "samples": n,
        "sample_bytes": manifest.sample_bytes,
        "files": nfiles,
        "bytes_on_disk": nbytes,
        "mb_on_disk": nbytes / 1e6,
        "write_seconds": t_write,
        "verify_seconds": t_verify,
        "samples_per_s": n / t_write,
        "checksum": manifest.checksum,
        "path": str(out),
    }


def _verify(tmp: Path, fmt: str) -> float:
    """Read back what was written under ``tmp`` and check every sample; the seconds it took."""
    t0 = time.perf_counter()
    reader = open_dataset(tmp)
    try:
        reader.verify()
    finally:
        reader.close()
        if fmt == "lmdb":
            lmdb_format.forget(tmp)  # the map must not outlive the temporary name
    return time.perf_counter() - t0


def _seal(tmp: Path, manifest: Manifest) -> tuple[int, int]:
    """Write the manifest again with what is on disk (and each data file's size); the bytes
    and files on disk."""
    nbytes, nfiles = disk_usage(tmp)
    manifest.files, manifest.bytes_on_disk = nfiles, nbytes
    if nfiles <= MAX_SIZED_FILES:
        # Sizes of the data files: a truncated copy is caught before it is mapped (a map
        # past the end of a file kills the reader with SIGBUS instead of an error).
        manifest.options["file_sizes"] = {
            str(p.relative_to(tmp)): p.stat().st_size
            for p in sorted(tmp.rglob("*"))
            if p.is_file() and p.name not in (MANIFEST, "lock.mdb")
        }
    (tmp / MANIFEST).write_text(manifest.to_json())
    return nbytes, nfiles
