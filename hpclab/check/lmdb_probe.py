"""What a student's LMDB Dataset does, counted per process (chapter 04's lazy-Dataset check).

While the check runs, ``lmdb.open`` returns an environment whose transactions and cursors count
what they read. Every process (the notebook's and each forked DataLoader worker) appends one line
per event to a log file ("pid event"), so the parent sees what each worker did: opens, records
read, cursor scans, items asked for.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from pathlib import Path
from typing import Any


class Log:
    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, event: str) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{os.getpid()} {event}\n".encode())
        finally:
            os.close(fd)

    def counts(self) -> dict[int, dict[str, int]]:
        out: dict[int, dict[str, int]] = {}
        if os.path.exists(self.path):
            for line in Path(self.path).read_text().splitlines():
                pid, event = line.split()
                per = out.setdefault(int(pid), {})
                per[event] = per.get(event, 0) + 1
        return out


class _Counted:
    """Delegates to a py-lmdb object; reads are logged."""

    def __init__(self, inner: Any, log: Log) -> None:
        self._inner, self._log = inner, log

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __enter__(self) -> Any:
        self._inner.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._inner.__exit__(*exc)


class _Cursor(_Counted):
    def get(self, *a: Any, **k: Any) -> Any:
        self._log("get")
        return self._inner.get(*a, **k)

    def set_key(self, *a: Any, **k: Any) -> Any:
        self._log("get")
        return self._inner.set_key(*a, **k)

    def __iter__(self) -> Any:
        self._log("scan")
        return iter(self._inner)

    def iternext(self, *a: Any, **k: Any) -> Any:
        self._log("scan")
        return self._inner.iternext(*a, **k)


class _Txn(_Counted):
    def get(self, *a: Any, **k: Any) -> Any:
        self._log("get")
        return self._inner.get(*a, **k)

    def cursor(self, *a: Any, **k: Any) -> Any:
        return _Cursor(self._inner.cursor(*a, **k), self._log)


class _Env(_Counted):
    def begin(self, *a: Any, **k: Any) -> Any:
        return _Txn(self._inner.begin(*a, **k), self._log)


_REAL_ENV: list[type] = []  # lmdb.Environment itself while it is patched


class CountOpens:
    """Within the block, ``lmdb.open`` (and ``lmdb.Environment``) log each open."""

    def __init__(self, log: Log) -> None:
        self.log = log

    def __enter__(self) -> CountOpens:
        import lmdb

        self.saved = lmdb.open, lmdb.Environment
        _REAL_ENV[:] = [lmdb.Environment]
        real, log = lmdb.open, self.log

        def counted_open(*a: Any, **k: Any) -> Any:
            log("open")
            return _Env(real(*a, **k), log)

        lmdb.open = counted_open
        lmdb.Environment = counted_open
        return self

    def __exit__(self, *exc: Any) -> None:
        import lmdb

        lmdb.open, lmdb.Environment = self.saved


class _Items:
    """Logs every item the DataLoader asks for, then asks the student's Dataset."""

    def __init__(self, inner: Any, log: Log) -> None:
        self.inner, self.log = inner, log

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i: int) -> Any:
        self.log("item")
        return self.inner[i]


def handles(obj: Any) -> list[str]:
    """Attribute names of ``obj`` that hold an open LMDB environment or transaction."""
    import lmdb

    env = _REAL_ENV[0] if _REAL_ENV else lmdb.Environment
    kinds = (env, lmdb.Transaction, lmdb.Cursor, _Counted)
    found = []
    for name, value in vars(obj).items():
        values = value if isinstance(value, (list, tuple)) else (value,)
        if any(isinstance(v, kinds) for v in values):
            found.append(name)
    return found


def read_all(ds: Any, log: Log, batch: int) -> tuple[Any, Any]:
    """Every sample through a 2-worker DataLoader; the workers are shut down even on errors."""
    import torch
    from torch.utils.data import DataLoader

    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
    loader = DataLoader(
        _Items(ds, log), batch_size=batch, num_workers=2, multiprocessing_context=ctx, timeout=60
    )
    it = iter(loader)
    try:
        xs, ys = [], []
        for x, y in it:
            xs.append(torch.as_tensor(x))
            ys.append(torch.as_tensor(y))
        return torch.cat(xs), torch.cat(ys)
    finally:
        it._shutdown_workers()  # no worker outlives the check, even when the student's code raised
        del it
