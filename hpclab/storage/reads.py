"""Experiments ``pack`` and ``storage-read``: write each format, then read it the way a job would
(chapter 04).

``storage-read`` measures random vs sequential order, warm vs cold page cache, per format, in
samples/s and MB/s. Repeats are interleaved across formats (format A, B, A, B, ...) so a noisy
neighbour slows every format alike. *Cold* evicts the dataset's pages with ``posix_fadvise``
before each timed read and records how much was still cached (``resident_before``), so a cold
number that is secretly warm (tmpfs, macOS) shows as such.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hpclab.config import Config, ConfigError, param
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.storage.base import FORMATS
from hpclab.storage.data import make_source, parse_shape
from hpclab.storage.pack import DEFAULT_MAX_FILES, open_dataset, pack

SOURCES = ("synthetic", "digits", "folder", "stored")


@dataclass(frozen=True)
class PackConfig(Config):
    format: tuple = param(("lmdb",), choices=FORMATS, help="format(s) to write")
    samples: int = param(20000, min=1, max=2_000_000, quick=1000, help="samples (synthetic source)")
    shape: tuple = param((3, 32, 32), min=1, max=4096, help="C,H,W of each sample")
    source: str = param("synthetic", choices=SOURCES, help="what to pack")
    path: str = param("", help="source path: an image tree (folder) or a packed dataset (stored)")
    out: str = param("", help="output directory ('' = scratch: $SLURM_TMPDIR, $TMPDIR or /tmp)")
    max_files: int = param(
        DEFAULT_MAX_FILES, min=1, max=10_000_000, help="refuse to create more files"
    )
    layout: str = param("contiguous", choices=("contiguous", "chunked"), help="HDF5 layout")
    compression: str = param(
        "none", choices=("none", "gzip", "lzf"), help="HDF5 compression (chunked)"
    )
    per_shard: int = param(1000, min=1, max=1_000_000, help="samples per tar shard")
    seed: int = param(0, min=0, max=2**31 - 1, help="synthetic data seed")

    def check(self) -> None:
        parse_shape(self.shape)
        if self.source in ("folder", "stored") and not self.path:
            raise ConfigError(f"source={self.source!r} needs --path (the data to pack)")
        if self.compression != "none" and self.layout != "chunked":
            raise ConfigError(f"compression={self.compression!r} needs layout='chunked'")


def run_pack(config: PackConfig, progress: Progress) -> Result:
    """Pack the source once per format; ``out`` is the dataset (one format) or its parent."""
    from hpclab.storage.workspace import data_root

    shape = parse_shape(config.shape)
    if config.source == "stored":
        source = open_dataset(config.path)
    else:
        source = make_source(config.source, config.samples, shape, config.seed, config.path)
    base = Path(config.out) if config.out else data_root() / f"pack-{config.source}"
    if not config.out or len(config.format) > 1:
        base.mkdir(parents=True, exist_ok=True)
    records = []
    for k, fmt in enumerate(config.format):
        out = base if config.out and len(config.format) == 1 else base / fmt
        note = f"packing {fmt} ({k + 1}/{len(config.format)})"
        rec = pack(
            source,
            fmt,
            out,
            max_files=config.max_files,
            progress=lambda d, t, note=note: progress.update(d, t, note),
            layout=config.layout,
            compression=config.compression,
            per_shard=config.per_shard,
        )
        records.append(rec)
    progress.update(1, 1, "")
    return make_result("pack", config, records)


@dataclass(frozen=True)
class ReadConfig(Config):
    format: tuple = param(("lmdb", "files-npy", "hdf5"), choices=FORMATS, help="formats to compare")
    path: str = param("", help="a packed dataset to read ('' = synthetic data packed in scratch)")
    samples: int = param(20000, min=10, max=2_000_000, quick=1000, help="samples in the dataset")
    shape: tuple = param((3, 32, 32), min=1, max=4096, help="C,H,W of each sample")
    order: tuple = param(
        ("random", "sequential"), choices=("random", "sequential"), help="read order"
    )
    cache: tuple = param(("warm", "cold"), choices=("warm", "cold"), help="page cache state")
    reads: int = param(0, min=0, max=10_000_000, help="samples read per measurement (0 = all)")
    repeat: int = param(3, min=1, max=50, quick=2, help="timed repeats (interleaved)")
    readahead: bool = param(False, help="LMDB: let the kernel read ahead (helps cold sequential)")
    seed: int = param(0, min=0, max=2**31 - 1, help="data and order seed")

    def check(self) -> None:
        parse_shape(self.shape)


def _path_format(path: str, formats: tuple) -> str:
    """The format stored at ``path``; a single ``--format`` that disagrees is an error."""
    from hpclab.storage.base import read_manifest

    fmt = read_manifest(path).format
    if len(formats) == 1 and formats[0] != fmt:
        raise ConfigError(f"format={formats[0]!r} but path={path!r} holds {fmt!r}")
    return fmt


def _read_all(ds: Any, order: np.ndarray) -> int:
    total = 0
    sample = ds.sample
    for i in order:
        x, _ = sample(int(i))
        total += x.nbytes
    return total


def run_read(config: ReadConfig, progress: Progress) -> Result:
    from hpclab.storage.cache import evict, resident_fraction
    from hpclab.storage.workspace import resolve

    shape = parse_shape(config.shape)
    paths = {}
    for k, fmt in enumerate(config.format):
        progress.update(k, len(config.format), f"preparing {fmt}")
        paths[fmt] = resolve(config.path, fmt, config.samples, shape, config.seed)
    if config.path:
        paths = {_path_format(config.path, config.format): paths[config.format[0]]}
    rng = np.random.default_rng(config.seed)
    cases = [(f, c, o) for f in paths for c in config.cache for o in config.order]
    times: dict[tuple, list[float]] = {c: [] for c in cases}
    resident: dict[tuple, list[float]] = {c: [] for c in cases}
    info: dict[str, tuple[int, int]] = {}
    total = config.repeat * len(cases)
    for rep in range(config.repeat):
        for k, case in enumerate(cases):
            fmt, cache, order = case
            progress.update(rep * len(cases) + k, total, f"{fmt} {cache} {order}")
            kw = {"readahead": config.readahead} if fmt == "lmdb" else {}
            ds = open_dataset(paths[fmt], **kw)
            n = len(ds)
            m = min(config.reads or n, n)
            idx = rng.permutation(n)[:m] if order == "random" else np.arange(m)
            if cache == "cold":
                evict(paths[fmt])
            else:
                _read_all(ds, np.arange(n))  # warm-up: every page in the cache
            resident[case].append(resident_fraction(paths[fmt]) or 0.0)
            t0 = time.perf_counter()
            nbytes = _read_all(ds, idx)
            times[case].append(time.perf_counter() - t0)
            info[fmt] = (m, nbytes)
            ds.close()
    progress.update(total, total, "")
    records = []
    for case in cases:
        fmt, cache, order = case
        m, nbytes = info[fmt]
        med = statistics.median(times[case])
        records.append(
            {
                "format": fmt,
                "cache": cache,
                "order": order,
                "samples": m,
                "samples_per_s": m / med,
                "mb_per_s": nbytes / med / 1e6,
                "seconds": med,
                "seconds_min": min(times[case]),
                "seconds_max": max(times[case]),
                "repeats": len(times[case]),
                "resident_before": statistics.fmean(resident[case]),
            }
        )
    return make_result("storage-read", config, records)
