"""Experiment ``pack``: write a source as each format, atomically and verified (chapter 04).

The writing itself is :func:`hpclab.storage.pack.pack`; this module turns a validated
:class:`PackConfig` into one record per format.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hpclab.config import Config, ConfigError, param
from hpclab.private import private_dir
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.storage.data import make_source, parse_shape
from hpclab.storage.dataset import FORMATS
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
        private_dir(base)
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
