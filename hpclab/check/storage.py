"""Checks for chapter 04's exercises: tar shards, read bandwidth, workers (the lazy LMDB
Dataset: :mod:`hpclab.check.lazy_dataset`)."""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from hpclab.check import CheckResult, as_number, error_line, exercise_check, failed, near, passed
from hpclab.check.cases import case_by_case
from hpclab.check.lazy_dataset import lazy_dataset  # noqa: F401 - the notebook imports it here


@exercise_check
def shards(pack_fn: Callable, read_fn: Callable) -> CheckResult:
    """``pack_fn(folder, out_dir, per_shard)`` writes tar shards; ``read_fn(out_dir)`` yields
    ``(name, bytes)`` in the original (sorted) order. Tried with a partly filled last shard
    and more than 10 shards (45 files, 4 per shard), and with shards that divide evenly."""
    for files, per_shard in ((45, 4), (30, 10)):
        result = _shards_case(pack_fn, read_fn, files, per_shard)
        if not result.passed:
            return result
    return passed("the shards hold every file once, and read back in order.")


def _shards_case(pack_fn: Callable, read_fn: Callable, files: int, per_shard: int) -> CheckResult:
    rng = np.random.default_rng(4 + files)
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
            return failed(f"pack_fn({files} files, per_shard={per_shard}) raised {error_line(err)}")
        tars = sorted(p for p in out.iterdir() if p.name.endswith(".tar"))
        expected = math.ceil(files / per_shard)
        if len(tars) != expected:
            last = "the last one partly filled" if files % per_shard else "all full"
            return failed(
                f"found {len(tars)} .tar shards in the output, expected {expected} "
                f"({files} files, {per_shard} per shard, {last})"
            )
        try:
            got = [(os.path.basename(str(n)), bytes(d)) for n, d in read_fn(str(out))]
        except Exception as err:  # noqa: BLE001
            return failed(f"read_fn raised {error_line(err)}")
        if len(got) < files:
            missing = (
                "is the last, partly filled shard written and read?"
                if files % per_shard
                else ("are all shards read?")
            )
            return failed(
                f"read back {len(got)} of {files} files ({per_shard} per shard): {missing}"
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
    return passed("")


@exercise_check
def read_bandwidth(
    mb_per_s: Any,
    files_per_s: Any,
    shard_files_per_s: Any,
    target_img_s: float = 3000,
    sample_kb: float = 110,
    per_shard: int = 1024,
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
        elif near(r, 1.024, 0.005):
            hints.append("mb_per_s: a kB here is 1000 bytes, not 1024")
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
        if values["shard_files_per_s"] in (math.floor(want_shards), math.ceil(want_shards)):
            hints.append(
                f"shard_files_per_s: a rate need not be whole: {target_img_s:g} / {per_shard} "
                "opens per second, not rounded"
            )
        elif near(rs, per_shard**2):
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


# samples/s by num_workers: workers pay off (1 suffices; 2 is needed; 1 exactly at 90 % of the
# best), 0 workers close to the best (still no overlap), and samples so cheap that 0 wins.
WORKER_TABLES = (
    {0: 100.0, 1: 200.0, 2: 210.0, 4: 212.0},
    {0: 100.0, 1: 150.0, 2: 190.0, 4: 200.0},
    {0: 90.0, 1: 180.0, 2: 200.0, 4: 199.0},
    {0: 195.0, 1: 190.0, 2: 200.0},
    {0: 500.0, 1: 300.0, 2: 320.0},
)


@exercise_check
def workers(fn: Callable[[dict[int, float]], Any], table: dict[int, float]) -> CheckResult:
    """``fn(table)`` -> the smallest ``num_workers`` >= 1 whose samples/s is within 10 % of the
    best, tried on the student's measurement and on tables where other counts are right.

    Chapter 04's lesson: workers overlap loading with the training step, and 0 workers do not
    (the training process decodes every batch itself). 0 is the answer only when every worker
    count is more than 10 % below it: samples so cheap that moving them between processes
    costs more than reading them.
    """
    if not callable(fn):
        return failed("pass your function itself, e.g. workers(choose_workers, table)")
    if not table:
        return failed("the measurement table is empty: run the loader sweep first")
    name = getattr(fn, "__name__", "your function")
    tables = [("your measurement", (table,))] + [
        ("the table " + ", ".join(f"{w}: {v:g}" for w, v in t.items()), (t,)) for t in WORKER_TABLES
    ]
    wrong = case_by_case(fn, tables, f"{name}(table)", _workers_mistake)
    if wrong is not None:
        return wrong
    return passed(
        "your rule picks the fewest workers (at least 1) within 10% of the best, here and on "
        "tables where 1, 2 or 0 workers are right: only workers overlap loading with training; "
        "0 only when every worker count is more than 10% slower."
    )


def _workers_mistake(num: float, table: dict[int, float], tolerance: float = 0.10) -> str | None:
    """None when ``num`` is the rule's pick for ``table``; else why it is not."""
    if num not in table:
        return f"{num!r} workers were not measured; pick one of {sorted(table)}"
    pick = int(num)
    best = max(table.values())
    floor = (1 - tolerance) * best
    good = sorted(w for w, v in table.items() if w >= 1 and v >= floor)
    want = good[0] if good else 0
    if pick == want:
        return None
    if pick == 0:
        return (
            f"with 0 workers the training process decodes every batch itself, so loading never "
            f"overlaps the training step; {want} worker(s) reach {table[want]:.0f} samples/s, "
            f"within 10% of the best ({best:.0f})"
        )
    if table[pick] < floor:
        return (
            f"{pick} workers reach {table[pick]:.0f} samples/s, more than 10% below the best "
            f"({best:.0f}); look for the smallest count that is within 10%"
        )
    return (
        f"{pick} workers are within 10% of the best, but {want} already are: each extra "
        "worker is a process that takes a core (and memory) from the training job"
    )
