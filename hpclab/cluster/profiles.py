"""Site profiles: what a cluster offers and how its job scripts look (chapter 07, "On the cluster").

A profile is a data file in ``hpclab/cluster/sites/``: partitions with their time limit, node
count, cores, GPUs and memory per node; whether an account is required and what one looks like;
how GPUs are asked for; the environment setup lines; where node-local scratch lives; the source
and the date it was checked. Bundled: ``local`` (this machine's local Slurm), ``generic``,
``alliance`` (Digital Research Alliance of Canada, the clusters that succeeded Graham and Cedar),
``perlmutter`` (NERSC) and ``graham_2019`` (the GPU node of Guan 2019, kept as a reference).

:func:`detect` names the site this process runs on; :func:`with_live_partitions` replaces a
profile's partitions by what ``sinfo`` reports when a Slurm answers.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hpclab.config import ConfigError

SITES_DIR = Path(__file__).with_name("sites")


@dataclass(frozen=True)
class Partition:
    name: str
    max_time: str  # Slurm time format, e.g. "1-00:00:00"
    nodes: int
    cpus_per_node: int
    gpus_per_node: int
    mem_gb_per_node: float


@dataclass(frozen=True)
class SiteProfile:
    name: str
    title: str
    source: str
    checked: str
    partitions: dict[str, Partition]
    default_partition: str
    account_required: bool
    account_example: str
    account_pattern: str
    gpu_option: str  # e.g. "--gpus-per-node={gpus}" or "--gres=gpu:{gpus}"
    partition_option: str = "--partition={partition}"
    extra_directives: tuple[str, ...] = ()
    setup: tuple[str, ...] = ()
    tmpdir: str = "${SLURM_TMPDIR:-/tmp}"
    notes: str = ""
    detect_rules: dict[str, Any] = field(default_factory=dict)

    def partition(self, name: str | None) -> Partition:
        name = name or self.default_partition
        if name not in self.partitions:
            raise ConfigError(
                f"partition={name!r} does not exist at site {self.name}; "
                f"allowed: {', '.join(sorted(self.partitions))}"
            )
        return self.partitions[name]


def names() -> list[str]:
    return sorted(p.stem for p in SITES_DIR.glob("*.json"))


def load(name: str) -> SiteProfile:
    """The bundled profile ``name`` (one-line ConfigError naming the known ones)."""
    path = SITES_DIR / f"{name}.json"
    if not path.is_file():
        raise ConfigError(f"site={name!r} is unknown; known: {', '.join(names())}")
    raw = json.loads(path.read_text())
    parts = {k: Partition(name=k, **v) for k, v in raw["partitions"].items()}
    acct = raw.get("account", {})
    return SiteProfile(
        name=raw["name"],
        title=raw["title"],
        source=raw["source"],
        checked=raw["checked"],
        partitions=parts,
        default_partition=raw["default_partition"],
        account_required=bool(acct.get("required")),
        account_example=acct.get("example", ""),
        account_pattern=acct.get("pattern", ""),
        gpu_option=raw["gpu_option"],
        partition_option=raw.get("partition_option", "--partition={partition}"),
        extra_directives=tuple(raw.get("extra_directives", ())),
        setup=tuple(raw.get("setup", ())),
        tmpdir=raw.get("tmpdir", "${SLURM_TMPDIR:-/tmp}"),
        notes=raw.get("notes", ""),
        detect_rules=raw.get("detect", {}),
    )


def detect(environ: dict[str, str] | None = None) -> str | None:
    """The bundled site whose detection rule matches this environment, or None."""
    env = os.environ if environ is None else environ
    for name in names():
        rules = load(name).detect_rules
        want = rules.get("env", {})
        present = rules.get("env_present", [])
        if not want and not present:
            continue
        if all(env.get(k) == v for k, v in want.items()) and all(k in env for k in present):
            return name
    return None


def _minutes_to_slurm(text: str) -> str:
    """sinfo's %l ("30:00", "1-00:00:00", "infinite") as a Slurm time string."""
    return "365-00:00:00" if text.strip().lower() in ("infinite", "unlimited") else text.strip()


def parse_sinfo(text: str) -> dict[str, Partition]:
    """Partitions from ``sinfo -h -o '%P|%l|%D|%c|%m|%G'`` (a default partition ends in '*')."""
    out: dict[str, Partition] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, limit, nodes, cpus, mem, gres = line.split("|")[:6]
        name = name.rstrip("*")
        gpus = re.search(r"gpu(?::[^:,()]+)?:(\d+)", gres)
        part = Partition(
            name=name,
            max_time=_minutes_to_slurm(limit),
            nodes=int(nodes),
            cpus_per_node=int(cpus.rstrip("+")),
            gpus_per_node=int(gpus.group(1)) if gpus else 0,
            mem_gb_per_node=round(int(mem.rstrip("+")) / 1024, 1),
        )
        if name in out:  # several node kinds in one partition: keep the largest
            old = out[name]
            part = replace(
                old,
                nodes=old.nodes + part.nodes,
                cpus_per_node=max(old.cpus_per_node, part.cpus_per_node),
                gpus_per_node=max(old.gpus_per_node, part.gpus_per_node),
                mem_gb_per_node=max(old.mem_gb_per_node, part.mem_gb_per_node),
            )
        out[name] = part
    return out


def with_live_partitions(profile: SiteProfile, sinfo_text: str) -> SiteProfile:
    """``profile`` with the partitions a running Slurm reports (its default marked by '*')."""
    parts = parse_sinfo(sinfo_text)
    if not parts:
        return profile
    default = next(
        (ln.split("|")[0].rstrip("*") for ln in sinfo_text.splitlines() if "*|" in ln),
        next(iter(parts)),
    )
    return replace(profile, partitions=parts, default_partition=default)
