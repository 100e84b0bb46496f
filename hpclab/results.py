"""Results: records + config + environment, a per-user store, and bundled references (chapter 00).

Every experiment's ``run`` returns a :class:`Result`. Records are flat dicts whose field names
carry their units (``gflops``, ``seconds``, ``samples_per_s``, ``busbw_gbps``). Each record has a
``tier``: ``live`` (measured here, now), ``reference`` (a published or real-cluster figure, with
its ``source``) or ``model`` (a prediction). Results are saved to an SQLite file so a student can
compare today's GPU node with yesterday's CPU node (:func:`save`, :func:`load`, :func:`history`).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import sqlite3
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

from hpclab.config import RunError
from hpclab.private import private_dir, private_file

TIERS = ("live", "reference", "model")


@dataclasses.dataclass
class Result:
    experiment: str
    config: dict[str, Any]
    env: dict[str, Any]
    records: list[dict[str, Any]]
    created: str = dataclasses.field(
        default_factory=lambda: datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"
        )
    )

    def frame(self):
        """The records as a pandas DataFrame (one row per record), shown with three significant
        digits and whole numbers as integers (:func:`hpclab.display.readable`)."""
        import pandas as pd

        from hpclab.display import shown_readably

        frame = pd.DataFrame(self.records)
        if self.records and all(r.get("tier") == "reference" for r in self.records):
            return frame  # published numbers, shown as published (172.8, not 173)
        return shown_readably(frame)

    def to_dict(self) -> dict[str, Any]:
        """The CLI's ``--json`` object."""
        return {
            "experiment": self.experiment,
            "config": self.config,
            "env": self.env,
            "records": self.records,
            "created": self.created,
        }

    def to_json(self, **kwargs: Any) -> str:
        """Strict JSON: a NaN or infinite number (a failed trial's loss) becomes ``null``."""
        plain = json.loads(json.dumps(self.to_dict(), default=_jsonable))
        return json.dumps(_finite(plain), allow_nan=False, **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Result:
        return cls(
            experiment=data["experiment"],
            config=dict(data.get("config", {})),
            env=dict(data.get("env", {})),
            records=[dict(r) for r in data.get("records", [])],
            created=data.get("created", ""),
        )

    def __add__(self, other: Result) -> Result:
        """Concatenate records of the same experiment (e.g. live + reference for one plot)."""
        return Result(self.experiment, self.config, self.env, self.records + other.records)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy / torch scalars
        return value.item()
    if isinstance(value, (set, tuple)):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    return str(value)


def make_result(
    experiment: str,
    config: Any,
    records: Iterable[dict[str, Any]],
    ran_elsewhere: bool = False,
    timed: bool = True,
) -> Result:
    """Wrap live records with the config and this machine's fingerprint.

    ``ran_elsewhere``: the work ran outside this process tree (Slurm jobs): what this process's
    cores did meanwhile says nothing about it, so no CPU share is attached to the result.
    ``timed=False``: the records hold no speed (an inventory, a topology): no load can make
    them low, so no CPU share either.
    """
    from hpclab.measure.sysinfo import fingerprint

    cfg = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    rows = [{"tier": "live", **r} if "tier" not in r else dict(r) for r in records]
    env = fingerprint()
    if ran_elsewhere:
        env = {**env, "ran_elsewhere": True}
    if not timed:
        env = {**env, "untimed": True}
    return Result(experiment, cfg, env, rows)


def measured_here(result: Any) -> bool:
    """True when ``result`` has a live, timed record: model and reference rows are computed or
    bundled, an inventory holds no speed, so no load on this machine can make them low (no
    CPU-share note for them)."""
    if (getattr(result, "env", None) or {}).get("untimed"):
        return False
    records = getattr(result, "records", None) or ()
    return any(r.get("tier", "live") == "live" for r in records)


# --- the per-user store ---------------------------------------------------------------------


def store_path() -> Path:
    """``$HPCLAB_RESULTS`` (a file or a directory), else the user's data dir."""
    env = os.environ.get("HPCLAB_RESULTS")
    if env:
        p = Path(env).expanduser()
        return p / "results.sqlite" if p.is_dir() or not p.suffix else p
    import platformdirs

    return Path(platformdirs.user_data_dir("hpclab")) / "results.sqlite"


_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    experiment TEXT NOT NULL,
    created TEXT NOT NULL,
    host TEXT,
    label TEXT,
    config TEXT NOT NULL,
    env TEXT NOT NULL,
    records TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_experiment ON runs(experiment);
"""


def _connect(path: Path | None = None) -> sqlite3.Connection:
    path = path or store_path()
    private_dir(path.parent)
    # A 10 s busy timeout: two kernels of one student may save at the same moment.
    conn = sqlite3.connect(str(path), timeout=10.0)
    private_file(path)
    conn.executescript(_SCHEMA)
    return conn


class StoreError(RunError):
    """The store could not take a result (corrupt, unwritable, full): one line says which file
    and why, and where the result went instead."""


def save(result: Result, label: str = "", path: Path | None = None) -> int:
    """Store a result; returns its id. One transaction: a crash leaves it whole or absent.

    A store that cannot take it (corrupt, unwritable) raises :class:`StoreError`; the result is
    then written as JSON beside the store when that is possible, so nothing is lost."""
    path = path or store_path()
    try:
        return _insert(result, label, path)
    except (sqlite3.Error, OSError) as exc:
        why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else exc!r}"
        kept = _beside(result, path)
        where = f"written to {kept} instead" if kept else "printed only, not written anywhere"
        raise StoreError(f"result not stored in {path} ({why}); {where}") from None


def _beside(result: Result, path: Path) -> Path | None:
    """The result as a private JSON file beside the store (None when that fails too)."""
    stamp = result.created.replace(":", "").replace("+", "Z")
    out = path.with_name(f"unsaved-{result.experiment}-{stamp}-{os.getpid()}.json")
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(result.to_json())
        return out
    except OSError:
        return None


def _insert(result: Result, label: str, path: Path) -> int:
    conn = _connect(path)
    try:
        with conn:
            cur = conn.execute(
                "INSERT INTO runs (experiment, created, host, label, config, env, records) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    result.experiment,
                    result.created,
                    str(result.env.get("host", "")),
                    label,
                    json.dumps(result.config, default=_jsonable),
                    json.dumps(result.env, default=_jsonable),
                    json.dumps(result.records, default=_jsonable),
                ),
            )
        return int(cur.lastrowid)
    finally:
        conn.close()


def load(run_id: int, path: Path | None = None) -> Result:
    conn = _connect(path)
    try:
        row = conn.execute(
            "SELECT experiment, created, config, env, records FROM runs WHERE id = ?", (run_id,)
        ).fetchone()
    finally:
        conn.close()
    if row is None:
        raise KeyError(f"no saved result with id {run_id} in {path or store_path()}")
    experiment, created, config, env, records = row
    return Result(experiment, json.loads(config), json.loads(env), json.loads(records), created)


def history(experiment: str | None = None, path: Path | None = None):
    """All saved records as one DataFrame, with run id, label, host and time columns."""
    import pandas as pd

    conn = _connect(path)
    try:
        query = "SELECT id, experiment, created, host, label, records FROM runs"
        params: tuple = ()
        if experiment:
            query += " WHERE experiment = ?"
            params = (experiment,)
        rows = conn.execute(query + " ORDER BY id", params).fetchall()
    finally:
        conn.close()
    out = []
    for run_id, exp, created, host, label, records in rows:
        for rec in json.loads(records):
            out.append(
                {
                    "run_id": run_id,
                    "experiment": exp,
                    "created": created,
                    "host": host,
                    "label": label,
                    **rec,
                }
            )
    return pd.DataFrame(out)


# --- bundled references ---------------------------------------------------------------------


def reference_names() -> list[str]:
    """Names of the bundled reference result files (``hpclab/references/NAME.json``)."""
    folder = resources.files("hpclab") / "references"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json"))


def load_reference(name: str) -> Result:
    """A bundled published/real-cluster result; every record has ``tier="reference"`` and a
    ``source``. The file holds ``{"experiment", "source", "records", "notes"?}``."""
    folder = resources.files("hpclab") / "references"
    path = folder / f"{name}.json"
    if not path.is_file():
        raise KeyError(
            f"no reference named {name!r}; available: {', '.join(reference_names()) or 'none'}"
        )
    data = json.loads(path.read_text())
    source = data["source"]
    records = [{"tier": "reference", "source": source, **r} for r in data["records"]]
    env = {"source": source, "notes": data.get("notes", "")}
    return Result(data["experiment"], data.get("config", {}), env, records, data.get("date", ""))
