"""``JobSpec``: what a job asks of the scheduler, validated before it is sent (chapter 07).

The fields are ``sbatch``'s: nodes, tasks per node, cores per task, GPUs per node, a time limit,
memory per node, partition, account, and for later sections an array, a warning signal and
requeue. Format errors are refused when the spec is built; what a site cannot give (more GPUs
per node than it has, a time above the partition's limit, an unknown partition, a missing
account) is refused by :meth:`JobSpec.check_site` before anything is submitted. Every refusal
is one line naming the field, the value and what is allowed.

Asking for less is the lesson of Mao (2017) and Guan (2019): a small, short job starts sooner
(backfill), and what you ask for is what you get: with ``--cpus-per-task=4`` on a 32-core
node, the job's processes see 4 cores.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hpclab.cluster.profiles import SiteProfile
from hpclab.config import Config, ConfigError, param

_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
_MEM = re.compile(r"^(\d+)([KMGT]?)$", re.IGNORECASE)
_ARRAY = re.compile(r"^(\d+(?:-\d+(?::\d+)?)?)(,\d+(?:-\d+(?::\d+)?)?)*(%\d+)?$")
_SIGNAL = re.compile(r"^(B:)?(USR1|USR2|TERM|INT|HUP|URG)(@\d+)?$")
_DEPENDENCY = re.compile(
    r"^(?:(?:after|afterany|afterok|afternotok|aftercorr)(?::\d+(?:_\d+)?(?:\+\d+)?)+|singleton)"
    r"(?:[,?](?:(?:after|afterany|afterok|afternotok|aftercorr)(?::\d+(?:_\d+)?(?:\+\d+)?)+|singleton))*$"
)
_NAME = re.compile(r"^[A-Za-z0-9_.+-]{1,64}$")


def time_seconds(text: str) -> int:
    """Slurm's time formats in seconds: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S."""
    m = _TIME.match(text.strip())
    if not m:
        raise ConfigError(
            f"time={text!r} is not a Slurm time; allowed: minutes, MM:SS, HH:MM:SS or D-HH:MM:SS"
        )
    days, a, b, c = m.groups()
    nums = [int(x) for x in (a, b, c) if x is not None]
    if days is not None:  # D-H, D-H:M, D-H:M:S
        h, mi, s = (nums + [0, 0])[:3]
        return int(days) * 86400 + h * 3600 + mi * 60 + s
    if len(nums) == 1:
        return nums[0] * 60
    if len(nums) == 2:
        return nums[0] * 60 + nums[1]
    return nums[0] * 3600 + nums[1] * 60 + nums[2]


def mem_mb(text: str) -> int:
    """``--mem`` in MB ("512", "512M", "4G", "1T"; Slurm's default unit is MB)."""
    m = _MEM.match(text.strip())
    if not m:
        raise ConfigError(f"mem={text!r} is not a size; allowed: a number with K, M, G or T")
    scale = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[m.group(2).upper()]
    return max(1, int(int(m.group(1)) * scale))


def array_indices(text: str) -> list[int]:
    """The task ids of ``--array`` ("0-15%4" -> 0..15; "1,3,5-9:2" -> 1,3,5,7,9)."""
    out: list[int] = []
    for part in text.split("%")[0].split(","):
        rng, _, step = part.partition(":")
        lo, _, hi = rng.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1, int(step or 1)))
    return out


@dataclass(frozen=True)
class JobSpec(Config):
    name: str = param("hpclab", help="job name (letters, digits, _ . + -)")
    nodes: int = param(1, min=1, max=100000, help="nodes (--nodes)")
    ntasks_per_node: int = param(1, min=1, max=1024, help="tasks per node (--ntasks-per-node)")
    cpus_per_task: int = param(1, min=1, max=1024, help="cores per task (--cpus-per-task)")
    gpus_per_node: int = param(0, min=0, max=16, help="GPUs per node (--gpus-per-node)")
    time: str = param("00:10:00", help="time limit (--time), e.g. 30, 00:30:00, 1-00:00:00")
    mem: str = param("1G", help="memory per node (--mem), e.g. 512M, 4G")
    partition: str = param("", help="partition; empty: the site's default")
    account: str = param("", help="account to charge (--account), e.g. def-yourpi")
    array: str = param("", help="job array (--array), e.g. 0-15%4; empty: no array")
    signal: str = param("", help="warning signal (--signal), e.g. B:USR2@60")
    requeue: bool = param(False, help="may be requeued (--requeue)")
    dependency: str = param("", help="start after other jobs (--dependency), e.g. afterok:123")

    def check(self) -> None:
        if not _NAME.match(self.name):
            raise ConfigError(
                f"name={self.name!r} is not allowed; allowed: 1-64 of A-Z a-z 0-9 _ . + -"
            )
        if time_seconds(self.time) < 60:
            raise ConfigError(f"time={self.time!r} is under a minute; allowed: >= 1 minute")
        mem_mb(self.mem)
        if self.array and not _ARRAY.match(self.array):
            raise ConfigError(
                f"array={self.array!r} is not a job array; allowed: e.g. 0-15, 0-15%4, 1,3,5"
            )
        if self.signal:
            m = _SIGNAL.match(self.signal)
            if not m:
                raise ConfigError(
                    f"signal={self.signal!r} is not allowed; allowed: [B:]USR2|USR1|TERM|INT|HUP|URG[@seconds]"
                )
            before = int((m.group(3) or "@60")[1:])
            if before > 65535:
                raise ConfigError(f"signal={self.signal!r} comes too early; allowed: @0..@65535")
            if before >= time_seconds(self.time):
                raise ConfigError(
                    f"signal={self.signal!r} would come {before} s before a limit of "
                    f"{time_seconds(self.time)} s, i.e. at the start; allowed: @ below the time limit"
                )

        if self.dependency and not _DEPENDENCY.match(self.dependency):
            raise ConfigError(
                f"dependency={self.dependency!r} is not a Slurm dependency; allowed: "
                "afterok|afterany|afternotok|after|aftercorr:JOBID[:JOBID...] or singleton, "
                "joined by , (all) or ? (any)"
            )

    @property
    def time_s(self) -> int:
        return time_seconds(self.time)

    @property
    def tasks(self) -> int:
        return self.nodes * self.ntasks_per_node

    def check_site(self, site: SiteProfile) -> JobSpec:
        """Refuse what ``site`` cannot give, before submission; returns self when it fits."""
        part = site.partition(self.partition or None)
        where = f"partition {part.name} of {site.name}"
        if self.nodes > part.nodes:
            raise ConfigError(f"nodes={self.nodes} exceeds {where}; allowed: 1..{part.nodes}")
        if self.ntasks_per_node * self.cpus_per_task > part.cpus_per_node:
            raise ConfigError(
                f"ntasks_per_node x cpus_per_task = {self.ntasks_per_node * self.cpus_per_task} "
                f"exceeds the {part.cpus_per_node} cores per node of {where}; allowed: product <= {part.cpus_per_node}"
            )
        if self.gpus_per_node > part.gpus_per_node:
            raise ConfigError(
                f"gpus_per_node={self.gpus_per_node} exceeds {where}; "
                f"allowed: 0..{part.gpus_per_node}"
            )
        if self.time_s > time_seconds(part.max_time):
            raise ConfigError(
                f"time={self.time!r} exceeds the limit of {where}; allowed: <= {part.max_time}"
            )
        if mem_mb(self.mem) > part.mem_gb_per_node * 1024:
            raise ConfigError(
                f"mem={self.mem!r} exceeds {where}; allowed: <= {part.mem_gb_per_node:g}G"
            )
        if site.account_required and not self.account:
            raise ConfigError(
                f"account is required at {site.name}; allowed: your project, e.g. {site.account_example}"
            )
        if (
            self.account
            and site.account_pattern
            and not re.match(site.account_pattern, self.account)
        ):
            raise ConfigError(
                f"account={self.account!r} does not look like an account of {site.name}; "
                f"allowed: e.g. {site.account_example}"
            )
        return self
