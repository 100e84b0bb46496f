"""Check for chapter 04's first exercise: a lazy LMDB Dataset, safe in DataLoader workers.

It checks the mechanism, not only the samples, with the probes of
:mod:`hpclab.check.lmdb_probe` counting each process's opens, reads and scans: in order, what
``__init__`` did, what the notebook's own first look at ``ds[0]`` did, what each worker did, and
then the samples themselves.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from hpclab.check import CheckResult, error_line, exercise_check, failed, passed
from hpclab.check.lmdb_probe import CountOpens, Log, handles, read_all


@exercise_check
def lazy_dataset(cls: type, samples: int = 240, shape: tuple = (3, 8, 8)) -> CheckResult:
    """Run the student's LMDB Dataset class: the notebook's natural order (``ds[0]`` in the
    parent, then a DataLoader with ``num_workers=2``) on a fresh LMDB.

    Checks the mechanism, not only the samples: nothing opened by ``__init__``, at most one open
    per process (the parent's read of ``ds[0]`` included), one record read per item (no eager
    read of the whole database, no scan), and every sample decoded exactly.
    """
    from hpclab.storage import pack
    from hpclab.storage.data import SyntheticImages

    if not isinstance(cls, type):
        return failed(f"pass your Dataset class itself, got {type(cls).__name__}")
    src = SyntheticImages(samples, shape, seed=11)
    with tempfile.TemporaryDirectory(prefix="hpclab-check-") as tmp:
        path = Path(tmp) / "lmdb"
        pack(src, "lmdb", path)
        log = Log(str(Path(tmp) / "events"))
        with CountOpens(log):
            result = _lazy_dataset(cls, str(path), log, src, samples)
    return result


def _lazy_dataset(cls: type, path: str, log: Log, src: Any, samples: int) -> CheckResult:
    name = cls.__name__
    try:
        ds = cls(path)
    except Exception as err:  # noqa: BLE001 - feedback, not a traceback
        return failed(f"{name}(path) raised {error_line(err)}")
    wrong = _init_slip(ds, name, log) or _parent_slip(ds, log, samples)
    if wrong:
        return failed(wrong)
    try:
        x, y = read_all(ds, log, batch=40)
    except Exception as err:  # noqa: BLE001
        text = error_line(err)
        hint = ""
        if "already open" in text:
            hint = (
                ": this worker inherited the handle the parent opened for ds[0]; py-lmdb allows "
                "one per path per process, so close the inherited one before opening your own"
            )
        return failed(f"reading with num_workers=2 after ds[0] failed: {text}{hint}")
    workers = {pid: c for pid, c in log.counts().items() if pid != os.getpid()}
    wrong = _worker_slip(workers) or _sample_slip(x, y, src, samples)
    if wrong:
        return failed(wrong)
    n = sum(1 for c in workers.values() if c.get("item"))
    return passed(
        f"your Dataset opened LMDB once in this process and once in each of the {n} "
        "workers, read one record per item, and returned every sample exactly."
    )


def _init_slip(ds: Any, name: str, log: Log) -> str | None:
    """What ``__init__`` did that it should not: keep a handle, open the database, read."""
    opened = handles(ds)
    at_init = log.counts().get(os.getpid(), {})
    if not (opened or at_init.get("open")):
        return None
    what = f"keeps a handle in {opened[0]!r}" if opened else "opens the database"
    if at_init.get("get", 0) > 1 or at_init.get("scan"):
        what += " and reads records"
    return (
        f"{name}.__init__ {what}. A handle made in __init__ is copied into every forked "
        "worker (unsafe) and cannot be pickled for spawned ones, and reading there loads "
        "the whole data set before training starts: store only the path in __init__, and "
        "open on the first __getitem__ in each process"
    )


def _parent_slip(ds: Any, log: Log, samples: int) -> str | None:
    """What a student does first in a notebook: ``len(ds)``, then a look at two samples in the
    notebook's own process; how that went wrong, or None."""
    try:
        n = len(ds)
    except Exception as err:  # noqa: BLE001
        return f"len(dataset) raised {error_line(err)}"
    if n != samples:
        return f"len(dataset) is {n}; the database holds {samples} records"
    try:
        ds[0]
        ds[1]
    except Exception as err:  # noqa: BLE001
        return f"dataset[0] in the notebook's own process raised {error_line(err)}"
    parent = log.counts().get(os.getpid(), {})
    if not parent.get("open"):
        return (
            "dataset[0] read a sample but the check saw no lmdb.open call: open the database "
            "with lmdb.open(path, readonly=True, lock=False) in __getitem__"
        )
    if parent.get("open", 0) > 1:
        return (
            f"reading two items in one process opened LMDB {parent['open']} times: open it once "
            "per process (on the first __getitem__) and keep the handle"
        )
    if parent.get("scan") or parent.get("get", 0) > 2:
        whole = parent.get("scan") or parent.get("get", 0) >= samples
        return (
            f"reading 2 items read {parent.get('get', 0)} records"
            + (" and walked a cursor" if parent.get("scan") else "")
            + ": read only the record asked for, once"
            + (" (not the whole database)" if whole else "")
        )
    return None


def _worker_slip(workers: dict[int, dict[str, int]]) -> str | None:
    """How a DataLoader worker (its counts by pid) opened or read wrong, or None."""
    for c in workers.values():
        if c.get("open", 0) > 1:
            return (
                f"a worker opened LMDB {c['open']} times for {c.get('item', 0)} items: open "
                "once per process and keep the handle for the next items"
            )
        if c.get("item") and not c.get("open"):
            return (
                "a worker read items without opening LMDB itself: it used the handle inherited "
                "from the parent (unsafe after fork); open again when os.getpid() changed"
            )
        if c.get("scan") or c.get("get", 0) > c.get("item", 0):
            return (
                f"a worker read {c.get('get', 0)} records"
                + (" and walked a cursor" if c.get("scan") else "")
                + f" for {c.get('item', 0)} items: read only the record asked for, once"
            )
    return None


def _sample_slip(x: Any, y: Any, src: Any, samples: int) -> str | None:
    """How the decoded batches differ from the source's samples, or None."""
    want_x = np.stack([src.sample(i)[0] for i in range(samples)])
    want_y = np.array([src.sample(i)[1] for i in range(samples)])
    if tuple(x.shape) != want_x.shape:
        return (
            f"batches have shape {tuple(x.shape)}, expected {want_x.shape}: did you skip the "
            "8 label bytes before the image bytes, and reshape to (C, H, W)?"
        )
    if not np.array_equal(y.numpy(), want_y):
        return "labels differ: the first 8 bytes of a value are the label, int64 little-endian"
    if not np.array_equal(x.numpy().astype(np.uint8), want_x):
        return "images differ: the bytes after the label are the uint8 image, shape (C, H, W)"
    return None
