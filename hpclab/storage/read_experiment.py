"""Experiment ``storage-read``: read each format the way a job would (chapter 04).

It measures random vs sequential order, warm vs cold page cache, per format, in samples/s and
MB/s. Repeats are interleaved across formats (format A, B, A, B, ...) so a noisy neighbour slows
every format alike. *Cold* evicts the dataset's pages with ``posix_fadvise`` before each timed
read and records how much was still cached (``resident_before``), so a cold number that is
secretly warm (tmpfs, macOS) shows as such.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from hpclab.config import Config, ConfigError, param
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.storage.data import parse_shape
from hpclab.storage.dataset import FORMATS
from hpclab.storage.pack import open_dataset


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


def path_format(path: str, formats: tuple) -> str:
    """The format stored at ``path``; a single ``--format`` that disagrees is an error."""
    from hpclab.storage.dataset import read_manifest

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
        paths = {path_format(config.path, config.format): paths[config.format[0]]}
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
