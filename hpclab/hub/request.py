"""The spawn form of the course's JupyterHub: what a student asks Slurm for (chapter 07).

One frozen, validated :class:`SpawnRequest`; bad input raises :class:`~hpclab.config.ConfigError`
with one line naming the field and what is allowed, which the hub shows above the form. The
limits come from the site (:class:`SiteLimits`, set in ``jupyterhub_config.py``), so a student
cannot ask for 64 cores on a 2-core partition and wait forever for a job that will never start.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from hpclab.config import ConfigError

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")  # partition and account names, nothing to inject


@dataclass(frozen=True)
class SiteLimits:
    """What the site allows in the form, and its defaults (set by the instructor)."""

    max_cores: int = 4
    max_mem_gb: int = 16
    max_gpus: int = 0
    max_minutes: int = 480
    partitions: tuple[str, ...] = ()  # empty: the site's default partition, no choice
    default_cores: int = 1
    default_mem_gb: int = 2
    default_minutes: int = 60
    account: str = ""


@dataclass(frozen=True)
class SpawnRequest:
    """One student's request: ``cores`` CPUs, ``mem_gb`` GB, ``gpus``, ``minutes``, a partition."""

    cores: int
    mem_gb: int
    gpus: int
    minutes: int
    partition: str = ""
    limits: SiteLimits = field(default_factory=SiteLimits, compare=False, repr=False)

    def __post_init__(self) -> None:
        lim = self.limits
        for name, value, top in (
            ("cores", self.cores, lim.max_cores),
            ("memory (GB)", self.mem_gb, lim.max_mem_gb),
            ("minutes", self.minutes, lim.max_minutes),
        ):
            if not 1 <= value <= top:
                raise ConfigError(f"{name}={value} is not allowed here: choose 1..{top}")
        if not 0 <= self.gpus <= lim.max_gpus:
            allowed = (
                "0 (this site has no GPUs in the form)"
                if not lim.max_gpus
                else f"0..{lim.max_gpus}"
            )
            raise ConfigError(f"gpus={self.gpus} is not allowed here: choose {allowed}")
        if lim.partitions and self.partition not in lim.partitions:
            raise ConfigError(
                f"partition={self.partition!r} is not offered: choose one of {', '.join(lim.partitions)}"
            )
        if self.partition and not _NAME.match(self.partition):
            raise ConfigError(f"partition={self.partition!r}: letters, digits, '_', '.', '-' only")

    def batch_options(self) -> dict[str, str]:
        """The values batchspawner puts into its batch script (``{{nprocs}}``, ``{{memory}}``...)."""
        hours, minutes = divmod(self.minutes, 60)
        return {
            "nprocs": str(self.cores),
            "memory": f"{self.mem_gb}G",
            "runtime": f"{hours:02d}:{minutes:02d}:00",
            "gres": f"gpu:{self.gpus}" if self.gpus else "",
            "partition": self.partition,
        }


def _int_field(form: Mapping[str, list[str]], key: str, label: str, default: int) -> int:
    raw = (form.get(key) or [str(default)])[0].strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{label}={raw!r} is not a whole number") from None


def parse_form(form: Mapping[str, list[str]], limits: SiteLimits) -> SpawnRequest:
    """The hub's form data (``{name: [value]}``) -> a validated request (ConfigError if not)."""
    partition = (form.get("partition") or [limits.partitions[0] if limits.partitions else ""])[0]
    return SpawnRequest(
        cores=_int_field(form, "cores", "cores", limits.default_cores),
        mem_gb=_int_field(form, "mem_gb", "memory (GB)", limits.default_mem_gb),
        gpus=_int_field(form, "gpus", "gpus", 0),
        minutes=_int_field(form, "minutes", "minutes", limits.default_minutes),
        partition=partition.strip(),
        limits=limits,
    )


def form_html(limits: SiteLimits) -> str:
    """The spawn form: numbers with the site's bounds, a partition menu when there is a choice."""

    def number(name: str, label: str, value: int, low: int, high: int) -> str:
        return (
            f'<div class="form-group"><label for="{name}">{label} ({low}–{high})</label>'
            f'<input class="form-control" type="number" id="{name}" name="{name}" '
            f'value="{value}" min="{low}" max="{high}" step="1"></div>'
        )

    rows = [
        number("cores", "CPU cores", limits.default_cores, 1, limits.max_cores),
        number("mem_gb", "Memory (GB)", limits.default_mem_gb, 1, limits.max_mem_gb),
        number("minutes", "Time (minutes)", limits.default_minutes, 1, limits.max_minutes),
    ]
    if limits.max_gpus:
        rows.append(number("gpus", "GPUs", 0, 0, limits.max_gpus))
    if limits.partitions:
        options = "".join(
            f'<option value="{html.escape(p)}">{html.escape(p)}</option>' for p in limits.partitions
        )
        rows.append(
            '<div class="form-group"><label for="partition">Partition</label>'
            f'<select class="form-control" id="partition" name="partition">{options}</select></div>'
        )
    return "\n".join(rows)
