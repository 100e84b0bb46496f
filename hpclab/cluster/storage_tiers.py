"""Where a cluster keeps files: the storage tiers of each site profile (chapter 07, section 8).

Every cluster of the course's decks has the same four tiers (Guan 2019 for Graham, Mao 2017 for
SHARCNET): a small, backed-up **home** for code; a large, backed-up **project** space shared by a
group; a very large, fast, *not* backed-up **scratch** whose old files are deleted (purged);
and the node's own **local** disk for the job's lifetime ($SLURM_TMPDIR). Quotas count bytes
*and* files: a million small files break a file quota long before the bytes (Mao 2017: over 10^6
files in /work or /scratch and no new job starts), which is why chapter 04 packs samples into
LMDB or shards. The tiers live in each profile's ``storage`` entry with their source and date;
:func:`tiers_table` shows them, :data:`SHARCNET_2017` is Mao 2017's older SHARCNET table.
"""

from __future__ import annotations

import json

import pandas as pd

from hpclab.cluster.profiles import SITES_DIR, load

# Mao 2017, "Essentials: File system basics" (SHARCNET before the national systems).
SHARCNET_2017 = {
    "source": 'Mao 2017: Fei Mao, "Deep Learning on SHARCNET: Best Practices", SHARCNET (2017)',
    "as_of": "2017",
    "tiers": [
        {"tier": "home", "path": "/home/$USER", "quota_bytes": 10**10, "purge_days": None,
         "backed_up": True, "seen_by": "every cluster", "note": "sources, small config files"},
        {"tier": "project", "path": "/work/$USER", "quota_bytes": 10**12, "purge_days": None,
         "backed_up": False, "seen_by": "every cluster", "note": "active data files"},
        {"tier": "scratch", "path": "/scratch/$USER", "quota_bytes": None, "purge_days": 60,
         "backed_up": False, "seen_by": "one cluster", "note": "expiry 2 months; checkpoints"},
        {"tier": "node-local", "path": "/tmp/$USER", "quota_bytes": None, "purge_days": 2,
         "backed_up": False, "seen_by": "its node only", "note": "best random access"},
    ],
}  # fmt: skip


def storage(site: str) -> dict:
    """The ``storage`` entry of site profile ``site`` (source, as_of, tiers)."""
    load(site)  # a one-line error naming the known sites
    raw = json.loads((SITES_DIR / f"{site}.json").read_text())
    return raw.get("storage", {"source": "", "as_of": "", "tiers": []})


def _size(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n:g} B"


def _files(n: int | None) -> str:
    return "-" if n is None else (f"{n / 1e6:g}M" if n >= 10**6 else f"{n / 1e3:g}k")


def _purge(days: int | None) -> str:
    if days is None:
        return "never"
    return "at job end" if days == 0 else f"after {days} days"


def _backup(flag: bool | None) -> str:
    return "?" if flag is None else ("yes" if flag else "no")


def tiers_table(site: str | dict) -> pd.DataFrame:
    """The tiers of ``site`` (a profile name, or an entry like :data:`SHARCNET_2017`) as a
    table: path, quota in bytes and files, purge, backed up, who sees it."""
    entry = storage(site) if isinstance(site, str) else site
    rows = [
        {
            "tier": t["tier"],
            "path": t["path"],
            "quota": _size(t.get("quota_bytes")),
            "files": _files(t.get("quota_files")),
            "purged": _purge(t.get("purge_days")),
            "backed up": _backup(t.get("backed_up")),
            "seen by": t.get("seen_by", ""),
            "note": t.get("note", ""),
        }
        for t in entry["tiers"]
    ]
    return pd.DataFrame(rows).set_index("tier")
