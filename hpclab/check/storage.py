"""Checks for chapter 04's exercises: a lazy LMDB Dataset, tar shards, read bandwidth, workers."""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from hpclab.check import CheckResult, as_number, failed, near, passed


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    # A DataLoader re-raises with "Caught X in DataLoader worker process 0." first; the
    # student's own message is the last line of the worker's traceback.
    return f"{type(err).__name__}: {text[-1] if text else ''}"


def _handles(obj: Any) -> list[str]:
    """Attribute names of ``obj`` that hold an open LMDB environment or transaction."""
    import lmdb

    kinds = (lmdb.Environment, lmdb.Transaction, lmdb.Cursor)
    found = []
    for name, value in vars(obj).items():
        values = value if isinstance(value, (list, tuple)) else (value,)
        if any(isinstance(v, kinds) for v in values):
            found.append(name)
    return found


def lazy_dataset(cls: type, samples: int = 240, shape: tuple = (3, 8, 8)) -> CheckResult:
    """Run the student's LMDB Dataset class with ``num_workers=2`` on a fresh LMDB.

    Fails a handle opened in ``__init__`` (a forked worker would share it), wrong decoding,
    and errors inside workers, each with the reason.
    """
    import torch
    from torch.utils.data import DataLoader

    from hpclab.storage import pack
    from hpclab.storage.data import SyntheticImages

    src = SyntheticImages(samples, shape, seed=11)
    with tempfile.TemporaryDirectory(prefix="hpclab-check-") as tmp:
        path = Path(tmp) / "lmdb"
        pack(src, "lmdb", path)
        try:
            ds = cls(str(path))
        except Exception as err:  # noqa: BLE001 - feedback, not a traceback
            return failed(f"{cls.__name__}(path) raised {_first_line(err)}")
        opened = _handles(ds)
        if opened:
            return failed(
                f"{cls.__name__}.__init__ opened LMDB already (attribute {opened[0]!r}). A handle "
                "made in __init__ is copied into every forked worker (unsafe) and cannot be "
                "pickled for spawned ones: store only the path in __init__, open on the first "
                "__getitem__ in each process (compare os.getpid())."
            )
        try:
            n = len(ds)
        except Exception as err:  # noqa: BLE001
            return failed(f"len(dataset) raised {_first_line(err)}")
        if n != samples:
            return failed(f"len(dataset) is {n}; the database holds {samples} records")
        ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
        try:
            loader = DataLoader(
                ds, batch_size=40, num_workers=2, multiprocessing_context=ctx, timeout=60
            )
            xs, ys = [], []
            for x, y in loader:
                xs.append(torch.as_tensor(x))
                ys.append(torch.as_tensor(y))
        except Exception as err:  # noqa: BLE001
            return failed(f"reading with num_workers=2 failed: {_first_line(err)}")
        x, y = torch.cat(xs), torch.cat(ys)
        want_x = np.stack([src.sample(i)[0] for i in range(samples)])
        want_y = np.array([src.sample(i)[1] for i in range(samples)])
        if tuple(x.shape) != want_x.shape:
            return failed(
                f"batches have shape {tuple(x.shape)}, expected {want_x.shape}: did you skip the "
                "8 label bytes before the image bytes, and reshape to (C, H, W)?"
            )
        if not np.array_equal(y.numpy(), want_y):
            return failed(
                "labels differ: the first 8 bytes of a value are the label, int64 little-endian"
            )
        if not np.array_equal(x.numpy().astype(np.uint8), want_x):
            return failed(
                "images differ: the bytes after the label are the uint8 image, shape (C, H, W)"
            )
        if _handles(ds):
            return failed(
                "the parent process opened the database while the workers read: open only in __getitem__"
            )
    return passed("your Dataset opens LMDB lazily in each worker and returns every sample exactly.")


def shards(
    pack_fn: Callable, read_fn: Callable, files: int = 45, per_shard: int = 4
) -> CheckResult:
    """``pack_fn(folder, out_dir, per_shard)`` writes tar shards; ``read_fn(out_dir)`` yields
    ``(name, bytes)`` in the original (sorted) order."""
    rng = np.random.default_rng(4)
    with tempfile.TemporaryDirectory(prefix="hpclab-check-") as tmp:
        folder, out = Path(tmp) / "small", Path(tmp) / "shards"
        folder.mkdir()
        out.mkdir()
        want = []
        for i in range(files):
            data = rng.integers(0, 256, int(rng.integers(10, 300)), dtype=np.uint8).tobytes()
            (folder / f"{i:05d}.bin").write_bytes(data)
            want.append((f"{i:05d}.bin", data))
        try:
            pack_fn(str(folder), str(out), per_shard)
        except Exception as err:  # noqa: BLE001
            return failed(f"pack_fn raised {_first_line(err)}")
        tars = sorted(p for p in out.iterdir() if p.name.endswith(".tar"))
        expected = math.ceil(files / per_shard)
        if len(tars) != expected:
            return failed(
                f"found {len(tars)} .tar shards in the output, expected {expected} "
                f"({files} files, {per_shard} per shard, the last one partly filled)"
            )
        try:
            got = [(os.path.basename(str(n)), bytes(d)) for n, d in read_fn(str(out))]
        except Exception as err:  # noqa: BLE001
            return failed(f"read_fn raised {_first_line(err)}")
        if len(got) < files:
            return failed(
                f"read back {len(got)} of {files} files: is the last, partly filled shard "
                "written and read?"
            )
        if len(got) > files:
            return failed(f"read back {len(got)} items for {files} files: something is read twice")
        if sorted(got) == want and got != want:
            k = next(i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b)
            return failed(
                f"all files came back, but out of order (first difference at position {k}: "
                f"{got[k][0]} instead of {want[k][0]}). Sort file names before packing, and "
                "read shards in numeric order (name them shard-000010.tar, not shard-10.tar)."
            )
        if got != want:
            return failed("the names or bytes read back differ from the original files")
    return passed("the shards hold every file once, and read back in order.")


def read_bandwidth(
    mb_per_s: Any,
    files_per_s: Any,
    shard_files_per_s: Any,
    target_img_s: float = 3000,
    sample_kb: float = 110,
    per_shard: int = 1000,
) -> CheckResult:
    """Bandwidth (MB/s, 10^6 bytes) and file opens per second a job needs at ``target_img_s``."""
    values = {}
    for name, v in (
        ("mb_per_s", mb_per_s),
        ("files_per_s", files_per_s),
        ("shard_files_per_s", shard_files_per_s),
    ):
        num = as_number(v, name)
        if isinstance(num, CheckResult):
            return num
        values[name] = num
    want_mb = target_img_s * sample_kb * 1e3 / 1e6
    want_files = target_img_s
    want_shards = target_img_s / per_shard
    hints = []
    r = values["mb_per_s"] / want_mb
    if not near(r, 1.0, 0.01):
        if near(r, 1 / 1.048576, 0.01) or near(r, 1 / 1.024, 0.01):
            hints.append("mb_per_s: use MB = 10^6 bytes (kB = 1000 bytes), not MiB")
        elif near(r, 8.0):
            hints.append("mb_per_s: that is megabits; divide by 8 for megabytes")
        elif near(r, 1e3) or near(r, 1e-3):
            hints.append("mb_per_s: check the kB -> MB conversion (a factor 1000 is off)")
        else:
            hints.append(f"mb_per_s is {r:.2f}x the expected value (images/s x bytes per image)")
    if not near(values["files_per_s"] / want_files, 1.0, 0.01):
        hints.append("files_per_s: with one file per sample, every image is one open")
    rs = values["shard_files_per_s"] / want_shards
    if not near(rs, 1.0, 0.01):
        if near(rs, per_shard**2):
            hints.append("shard_files_per_s: divide the images/s by the samples per shard")
        elif near(values["shard_files_per_s"] / want_files, 1.0, 0.01):
            hints.append(
                f"shard_files_per_s: one shard holds {per_shard} samples, so one open serves {per_shard} images"
            )
        else:
            hints.append(f"shard_files_per_s is {rs:.2f}x the expected value")
    if hints:
        return failed("; ".join(hints) + ".")
    return passed(
        "right: the bandwidth is modest for a parallel filesystem, but thousands of opens per "
        "second is what overloads its metadata server; shards turn them into a few."
    )


def workers(answer: Any, table: dict[int, float], tolerance: float = 0.10) -> CheckResult:
    """The smallest ``num_workers`` whose samples/s is within ``tolerance`` of the best."""
    if not table:
        return failed("the measurement table is empty: run the loader sweep first")
    num = as_number(answer, "my_workers")
    if isinstance(num, CheckResult):
        return num
    if num not in table:
        return failed(f"my_workers={answer!r} was not measured; pick one of {sorted(table)}")
    best = max(table.values())
    good = sorted(w for w, v in table.items() if v >= (1 - tolerance) * best)
    want = good[0]
    if int(num) == want:
        return passed(
            "the smallest worker count within 10% of the best: the remaining cores stay with training."
        )
    if table[int(num)] < (1 - tolerance) * best:
        return failed(
            f"{int(num)} workers reach {table[int(num)]:.0f} samples/s, more than 10% below the best "
            f"({best:.0f}); look for the smallest count that is within 10%"
        )
    return failed(
        f"{int(num)} workers are within 10% of the best, but {want} already are: each extra "
        "worker is a process that takes a core (and memory) from the training job"
    )
