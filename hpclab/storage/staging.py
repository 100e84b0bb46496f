"""Experiment ``staging``: copy the dataset to node-local disk first (chapter 04).

Mao 2017's advice for Lustre: it is fast for big sequential files and slow for many small ones
(every open is a round trip to the metadata server), so "move small files to /tmp in a tar
format". Here the same dataset is staged from a "shared" directory to node-local scratch
(``$SLURM_TMPDIR``, ``$TMPDIR``) three ways: N small files one by one, one tar (copied, then
unpacked locally), one LMDB file.

On a laptop there is no Lustre, so the shared side is a clearly labelled **simulated shared
filesystem**: every open sleeps ``open_latency_ms`` and reads are throttled to
``read_mb_per_s``. The records keep the simulated and the real seconds apart, a ``model`` row
predicts ``opens x latency + MB / bandwidth``, and Mao 2017's stripe-count table is bundled as
the reference for what real Lustre delivers.
"""

from __future__ import annotations

import shutil
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from hpclab.config import Config, param
from hpclab.private import private_dir
from hpclab.progress import Progress
from hpclab.results import Result, load_reference, make_result
from hpclab.storage.data import SyntheticImages, parse_shape

METHODS = ("files", "tar", "lmdb")
CHUNK = 1 << 20


class SimulatedSharedFS:
    """A per-open latency and a bandwidth cap around real file copies (a teaching model)."""

    def __init__(self, open_latency_ms: float, read_mb_per_s: float) -> None:
        self.latency_s = open_latency_ms / 1e3
        self.bandwidth = read_mb_per_s * 1e6  # bytes/s; 0 = unlimited
        self.opens = 0
        self.simulated_s = 0.0

    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)
            self.simulated_s += seconds

    def copy(self, src: Path, dst: Path) -> int:
        """Copy one file from the shared side; returns bytes copied."""
        self.opens += 1
        self._sleep(self.latency_s)
        n = 0
        with open(src, "rb") as fi, open(dst, "wb") as fo:
            while chunk := fi.read(CHUNK):
                fo.write(chunk)
                n += len(chunk)
                if self.bandwidth:
                    self._sleep(len(chunk) / self.bandwidth)
        return n


@dataclass(frozen=True)
class StagingConfig(Config):
    files: int = param(5000, min=10, max=200_000, quick=300, help="samples (= small files)")
    shape: tuple = param((3, 32, 32), min=1, max=4096, help="C,H,W of each sample")
    open_latency_ms: float = param(1.0, min=0.0, max=100.0, help="simulated per-open latency")
    read_mb_per_s: float = param(
        500.0, min=0.0, max=100_000.0, help="simulated bandwidth (0 = no cap)"
    )
    methods: tuple = param(METHODS, choices=METHODS, help="how to stage")
    local: str = param("", help="node-local target ('' = $SLURM_TMPDIR, $TMPDIR or /tmp)")


def _prepare_shared(root: Path, n: int, shape: tuple) -> dict[str, Path]:
    """The shared side (untimed, done once): small files, a tar of them, an LMDB."""
    from hpclab.storage.workspace import prepared

    files = prepared("files-npy", n, shape)
    tar = root / f"{files.parent.name}.tar"
    if not tar.is_file():
        tmp = tar.with_suffix(".tar.tmp")
        with tarfile.open(tmp, "w") as t:
            t.add(files, arcname="files-npy")
        tmp.rename(tar)
    lmdb = prepared("lmdb", n, shape)
    return {"files": files, "tar": tar, "lmdb": lmdb}


def _stage(method: str, shared: dict[str, Path], dest: Path, fs: SimulatedSharedFS) -> int:
    private_dir(dest.parent)
    dest.mkdir(mode=0o700)  # a fresh copy per method: fails if one is left over
    if method == "files":
        total = 0
        for src in sorted(shared["files"].rglob("*")):
            rel = src.relative_to(shared["files"])
            if src.is_dir():
                (dest / rel).mkdir(parents=True, exist_ok=True)
            else:
                total += fs.copy(src, dest / rel)
        return total
    if method == "tar":
        total = fs.copy(shared["tar"], dest / "data.tar")
        with tarfile.open(dest / "data.tar") as t:  # unpack on the fast local disk
            # filter="data" refuses absolute paths and links out of dest (PEP 706); Pythons
            # before 3.11.4 (e.g. Debian 12's 3.11.2) lack it, and this tar is our own.
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            t.extractall(dest, **safe)
        return total
    return sum(
        fs.copy(p, dest / p.name) for p in sorted(shared["lmdb"].iterdir()) if p.name != "lock.mdb"
    )


def run_staging(config: StagingConfig, progress: Progress) -> Result:
    import os

    from hpclab.storage.workspace import data_root

    shape = parse_shape(config.shape)
    SyntheticImages(1, shape)  # validates the shape early
    progress.update(0, len(config.methods) + 1, "preparing the shared copy")
    shared = _prepare_shared(data_root(), config.files, shape)
    local_root = Path(config.local) if config.local else data_root() / "local"
    private_dir(local_root)
    records = []
    for k, method in enumerate(config.methods):
        progress.update(k + 1, len(config.methods) + 1, f"staging as {method}")
        fs = SimulatedSharedFS(config.open_latency_ms, config.read_mb_per_s)
        dest = local_root / f"staging-{os.getpid()}-{method}"
        shutil.rmtree(dest, ignore_errors=True)
        t0 = time.perf_counter()
        try:
            nbytes = _stage(method, shared, dest, fs)
            seconds = time.perf_counter() - t0
        finally:
            shutil.rmtree(dest, ignore_errors=True)
        common = {"method": method, "opens": fs.opens, "mb": nbytes / 1e6}
        records.append(
            {
                **common,
                "tier": "live",
                "seconds": seconds,
                "simulated_seconds": fs.simulated_s,
                "real_seconds": seconds - fs.simulated_s,
                "mb_per_s": nbytes / 1e6 / seconds,
                "filesystem": "simulated shared -> local disk",
            }
        )
        bw = config.read_mb_per_s * 1e6
        predicted = fs.opens * config.open_latency_ms / 1e3 + (nbytes / bw if bw else 0.0)
        records.append(
            {
                **common,
                "tier": "model",
                "seconds": predicted,
                "formula": "opens x open_latency + bytes / bandwidth",
            }
        )
    ref = load_reference("mao2017_lustre_stripes")
    records.extend(ref.records)
    progress.update(len(config.methods) + 1, len(config.methods) + 1, "")
    return make_result("staging", config, records)
