"""Chapter 04 benchmarks: formats side by side in one run, repeats interleaved.

Goals (issue "Chapter 04"):
- hpclab's LMDB Dataset (warm, random order, no transform) >= 90% of a raw lmdb loop that
  decodes the same records into the same tensors;
- warm random reads: LMDB >= 5x one .npy file per sample (20 000 samples of 3x32x32);
- packing those 20 000 samples: LMDB >= 10x faster than one file per sample.
Cold reads (pages evicted with posix_fadvise) are reported, not judged: they measure this
machine's disk, not our code.

Run: python benchmarks/storage.py   (about a minute on 2 cores)
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

N, SHAPE, REPEAT = 20_000, (3, 32, 32), 5


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> int:
    import torch

    from hpclab.storage import open_dataset, pack
    from hpclab.storage.cache import evict, resident_fraction
    from hpclab.storage.data import ArraySource, SyntheticImages
    from hpclab.storage.lmdb_format import LABEL_BYTES, open_env, release_env
    from hpclab.storage.workspace import data_root

    root = Path(tempfile.mkdtemp(prefix="bench-", dir=data_root()))
    lines: list[str] = []
    try:
        print(f"generating {N} samples of {SHAPE} ...", flush=True)
        src = ArraySource.from_source(SyntheticImages(N, SHAPE))

        # --- packing: interleaved, write time only (verification reported separately) --------
        write = {"lmdb": [], "files-npy": []}
        # A-B-A: interleaved, and one files-npy pack fewer (20 000 files are slow on a busy disk)
        for rep, fmt in ((0, "lmdb"), (0, "files-npy"), (1, "lmdb")):
            rec = pack(src, fmt, root / f"{fmt}-{rep}")
            write[fmt].append(rec["write_seconds"])
            print(
                f"pack {fmt:<9} write {rec['write_seconds']:.3f} s, verify "
                f"{rec['verify_seconds']:.3f} s, {rec['files']} files, "
                f"{rec['mb_on_disk']:.1f} MB on disk",
                flush=True,
            )
        pack_ratio = min(write["files-npy"]) / min(write["lmdb"])
        shutil.rmtree(root / "lmdb-1")
        lm, fi = root / "lmdb-0", root / "files-npy-0"

        # --- hpclab LMDB Dataset vs a raw lmdb loop, warm, random order ----------------------
        order = np.random.default_rng(0).permutation(N).tolist()
        ds = open_dataset(lm)
        env = open_env(lm)  # the same environment the Dataset uses (one per path per process)
        txn = env.begin(buffers=True)

        def raw_loop():
            for i in order:
                value = txn.get(b"%08d" % i)
                label = int.from_bytes(value[:LABEL_BYTES], "little", signed=True)
                x = np.frombuffer(value, np.uint8, offset=LABEL_BYTES).reshape(SHAPE).copy()
                torch.from_numpy(x), label

        def dataset_loop():
            for i in order:
                ds[i]

        raw_loop(), dataset_loop()  # warm-up: pages cached, code paths hot
        raw_t, ds_t = [], []
        for _ in range(REPEAT):
            raw_t.append(timed(raw_loop))
            ds_t.append(timed(dataset_loop))
        ds_fraction = statistics.median(raw_t) / statistics.median(ds_t)
        print(f"warm random, raw lmdb loop  : {N / statistics.median(raw_t):,.0f} samples/s")
        print(f"warm random, hpclab Dataset : {N / statistics.median(ds_t):,.0f} samples/s")
        txn.abort()
        release_env(env)  # the map must go, or the cold reads below stay warm

        # --- warm random: LMDB vs one file per sample -----------------------------------------
        files = open_dataset(fi)
        for i in order:
            files.sample(i)  # warm the page cache
        lm_t, fi_t = [], []
        for _ in range(3):
            lm_t.append(timed(lambda: [ds.sample(i) for i in order]))
            fi_t.append(timed(lambda: [files.sample(i) for i in order]))
        warm_ratio = statistics.median(fi_t) / statistics.median(lm_t)
        print(f"warm random, lmdb           : {N / statistics.median(lm_t):,.0f} samples/s")
        print(f"warm random, files-npy      : {N / statistics.median(fi_t):,.0f} samples/s")
        ds.close()

        # --- cold random (report only) --------------------------------------------------------
        cold = {}
        m = 5000  # a random subset: a cold read of all 20k files takes long on slow disks
        sub = order[:m]
        for name, path, kw in (
            ("lmdb, readahead off", lm, {"readahead": False}),
            ("lmdb, readahead on", lm, {"readahead": True}),
            ("files-npy", fi, {}),
        ):
            times = []
            for _ in range(2):
                d = open_dataset(path, **kw)
                evict(path)
                before = resident_fraction(path)
                times.append(timed(lambda d=d: [d.sample(i) for i in sub]))
                d.close()
            cold[name] = m / statistics.median(times)
            print(
                f"cold random, {name:<20}: {cold[name]:,.0f} samples/s "
                f"(cached before: {0 if before is None else before:.0%})",
                flush=True,
            )
        lines.append(
            f"storage: lmdb_dataset_vs_raw={ds_fraction:.3f} goal>=0.9 "
            f"{'PASS' if ds_fraction >= 0.9 else 'FAIL'}"
        )
        lines.append(
            f"storage: warm_random_lmdb_vs_files_npy={warm_ratio:.1f} goal>=5 "
            f"{'PASS' if warm_ratio >= 5 else 'FAIL'}"
        )
        lines.append(
            f"storage: pack_lmdb_vs_files_npy={pack_ratio:.1f} goal>=10 "
            f"{'PASS' if pack_ratio >= 10 else 'FAIL'}"
        )
        print(
            f"(report) cold random lmdb/files-npy: readahead off "
            f"{cold['lmdb, readahead off'] / cold['files-npy']:.1f}x, on "
            f"{cold['lmdb, readahead on'] / cold['files-npy']:.1f}x; load average "
            f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
        )
    except Exception as err:  # noqa: BLE001 - exit 1 only when nothing could be measured
        print(f"storage: could not measure: {type(err).__name__}: {err}", file=sys.stderr)
        if not lines:
            return 1
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
