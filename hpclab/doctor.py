"""``hpclab doctor``: what this allocation can and cannot do, and how to fix it (chapter 00).

Each check returns one :class:`Check` with a one-line message and a one-line fix. Checks read
the facts from :func:`hpclab.measure.sysinfo.system_info` (pass your own ``info`` dict to test
them) and the environment variables as they are *now*, since a student may ``export`` one and
re-run the cell.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from hpclab.private import private_dir

Level = Literal["ok", "warn", "fail"]
OPTIONAL_PACKAGES = ("lmdb", "h5py", "plotly", "ipywidgets", "anywidget", "sklearn")
# PyTorch DataLoader workers pass batches through shared memory; Docker's default /dev/shm is
# 64 MB, and a few image batches already exceed that ("Bus error" in the worker).
SHM_MIN_GB = 1.0


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report (chapter 00)."""

    name: str
    level: Level
    message: str
    fix: str = ""


def _gpu(info: dict[str, Any]) -> Check:
    gpus = info.get("gpus") or []
    if not gpus:
        return Check(
            "gpu",
            "warn",
            "no GPU visible: GPU cells will show reference results",
            "on a cluster, ask for one: sbatch/salloc --gres=gpu:1",
        )
    names = ", ".join(f"{g.get('name')} ({(g.get('memory_gb') or 0):.0f} GB)" for g in gpus)
    if not info.get("cuda"):
        return Check(
            "gpu",
            "warn",
            f"{len(gpus)} GPU(s) present but torch is a CPU build",
            "install a CUDA build of torch (see the cluster's docs or module avail)",
        )
    return Check("gpu", "ok", f"{len(gpus)} GPU(s): {names}")


def _cuda_visible(info: dict[str, Any]) -> Check:
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None and not cvd.strip():
        return Check(
            "cuda_visible_devices",
            "warn",
            "CUDA_VISIBLE_DEVICES is set but empty: every GPU is hidden",
            "unset CUDA_VISIBLE_DEVICES, or list the GPUs to use",
        )
    if (cvd and "MIG-" in cvd) or os.environ.get("CUDA_MPS_PIPE_DIRECTORY"):
        from hpclab.cluster.gpu_sharing import sharing  # chapter 07: MIG and MPS

        return Check("cuda_visible_devices", "ok", sharing()["text"])
    return Check("cuda_visible_devices", "ok", f"CUDA_VISIBLE_DEVICES={cvd!r}" if cvd else "unset")


def _shm(info: dict[str, Any]) -> Check:
    gb = info.get("shm_gb")
    if gb is None:
        return Check(
            "shm",
            "warn",
            "/dev/shm not found: DataLoader workers may fail",
            "use DataLoader(num_workers=0)",
        )
    if gb < SHM_MIN_GB:
        return Check(
            "shm",
            "warn",
            f"/dev/shm is only {gb * 1024:.0f} MB: DataLoader workers "
            "share batches through /dev/shm",
            "use DataLoader(num_workers=0), or ask for more (docker run --shm-size=8g)",
        )
    return Check("shm", "ok", f"/dev/shm {gb:.1f} GB")


def _threads(info: dict[str, Any]) -> Check:
    usable, node = info.get("cores_usable") or 1, info.get("cores_node") or 1
    threads = info.get("torch_threads")
    if threads is None:
        try:
            import torch

            threads = torch.get_num_threads()
        except Exception:  # noqa: BLE001
            threads = None
    omp = os.environ.get("OMP_NUM_THREADS")
    fix = f"export OMP_NUM_THREADS={usable} (or torch.set_num_threads({usable}))"
    if threads is not None and threads > usable:
        return Check(
            "threads",
            "warn",
            f"torch uses {threads} threads on {usable} usable "
            "cores: oversubscribed, every thread waits for a core",
            fix,
        )
    if omp is None and node > usable:
        return Check(
            "threads",
            "warn",
            f"OMP_NUM_THREADS unset while only {usable} of {node} "
            "cores are yours: libraries may start one thread per node core",
            fix,
        )
    return Check("threads", "ok", f"{threads} torch threads on {usable} usable cores")


def _scratch(info: dict[str, Any]) -> Check:
    scratch = info.get("scratch") or {}
    bad = [k for k, v in scratch.items() if v.get("path") and not v.get("writable")]
    if bad:
        return Check(
            "scratch",
            "warn",
            f"not writable: {', '.join(bad)}",
            "point TMPDIR to a writable local directory",
        )
    ok = [f"{k} {v['free_gb']:.0f} GB free" for k, v in scratch.items() if v.get("free_gb")]
    return Check("scratch", "ok", "; ".join(ok) or "no scratch paths known")


def _root(info: dict[str, Any]) -> Check:
    if info.get("user_is_root"):
        return Check(
            "root",
            "warn",
            "running as root: fine in a container",
            "JupyterLab needs --allow-root; on a shared system use your own account",
        )
    return Check("root", "ok", "not root")


def _port(info: dict[str, Any]) -> Check:
    # gloo ranks connect over loopback TCP on ports the kernel chooses (port 0).
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            port = s.getsockname()[1]
    except OSError as exc:
        return Check(
            "port",
            "fail",
            f"cannot listen on 127.0.0.1 ({exc}): gloo ranks cannot connect",
            "check that the loopback interface is up and not firewalled",
        )
    return Check("port", "ok", f"can listen on 127.0.0.1 (got free port {port})")


def _reverse_dns(
    info: dict[str, Any], lookup: Callable[..., Any] = socket.getnameinfo, budget_s: float = 1.0
) -> Check:
    # PyTorch's TCPStore (torchrun, chapters 06-07) looks up the host name of every peer that
    # connects, as ::ffff:127.0.0.1 on one node. Where DNS drops or blocks such queries each
    # connection stalls 5 s, and a rendezvous with a short timeout fails. hpclab's own launcher
    # meets through a file and does not care; torchrun and srun-started jobs do.
    done = threading.Event()

    def probe() -> None:
        try:
            lookup(("::ffff:127.0.0.1", 0, 0, 0), 0)
        except OSError:
            pass
        done.set()

    threading.Thread(target=probe, name="hpclab-doctor-dns", daemon=True).start()
    if not done.wait(budget_s):
        return Check(
            "reverse_dns",
            "warn",
            f"looking up the name of ::ffff:127.0.0.1 took over {budget_s:g} s: torchrun's "
            "rendezvous will stall (hpclab's launcher is not affected)",
            "ask your admins about DNS on compute nodes; meanwhile give torchrun a long "
            "--rdzv-conf timeout",
        )
    return Check("reverse_dns", "ok", "loopback name lookup answers quickly")


def results_dir() -> str:
    """The directory of the results store (``hpclab.results.store_path``'s parent)."""
    from hpclab.results import store_path  # one rule for $HPCLAB_RESULTS: file or directory

    return str(store_path().parent)


def _results(info: dict[str, Any]) -> Check:
    path = None
    try:
        path = results_dir()
        private_dir(path)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".hpclab-probe-"):
            pass
    except Exception as exc:  # noqa: BLE001
        return Check(
            "results_dir",
            "fail",
            f"results store {path} not writable ({exc})",
            "export HPCLAB_RESULTS=/a/writable/dir",
        )
    return Check("results_dir", "ok", f"results store in {path}")


def _clock(info: dict[str, Any]) -> Check:
    ghz, nominal = info.get("clock_ghz"), info.get("clock_ghz_nominal")
    method = info.get("clock_method") or ""
    nom = f"{nominal:.2f} GHz" if nominal else "unknown"
    if ghz and method.startswith("measured"):
        return Check("clock", "ok", f"{ghz:.2f} GHz measured (nominal {nom})")
    if ghz:
        return Check(
            "clock",
            "warn",
            f"{ghz:.2f} GHz from {method}: peaks use the nominal clock; % of peak may exceed 100",
            "set HPCLAB_FLOPS_PER_CYCLE or read peaks as approximate",
        )
    return Check(
        "clock",
        "warn",
        f"clock unknown ({method}): no CPU peaks",
        "read CPU results as absolute numbers only",
    )


def _packages(info: dict[str, Any]) -> Check:
    missing = [p for p in OPTIONAL_PACKAGES if _soft_find(p) is None]
    if missing:
        return Check(
            "packages",
            "warn",
            f"missing optional packages: {', '.join(missing)}",
            f"pip install {' '.join('scikit-learn' if m == 'sklearn' else m for m in missing)}",
        )
    return Check("packages", "ok", f"optional packages present: {', '.join(OPTIONAL_PACKAGES)}")


def _soft_find(name: str) -> object | None:
    # find_spec locates a package without importing it (anywidget/plotly imports are slow).
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def _slurm_job(info: dict[str, Any]) -> Check:
    """The job this kernel runs in: its id, what it was given, its time left (chapter 07)."""
    from hpclab.cluster.profiles import detect
    from hpclab.measure.allocation import format_duration, slurm_allocation

    site = detect()
    site = f"site {site}; " if site else ""
    job = slurm_allocation()
    if job is None:
        return Check("slurm_job", "ok", f"{site}not inside a Slurm job")
    given = [f"{job.nodes} nodes"] if job.nodes and job.nodes > 1 else []
    given.append(f"{job.cpus} core{'s' if job.cpus != 1 else ''}" if job.cpus else "cores ?")
    if job.mem_gb:
        given.append(f"{job.mem_gb:.1f} GB")
    given.append(f"{job.gpus or 0} GPU{'s' if (job.gpus or 0) != 1 else ''}")
    left = f", {format_duration(job.time_left_s)} left" if job.time_left_s is not None else ""
    text = f"{site}job {job.job_id} on {job.node or '?'}: {', '.join(given)}{left}"
    cpus = info.get("cpus_allowed")
    if cpus:  # the binding (chapter 07): two ranks with one CPU list share those cores
        from hpclab.cluster.binding import cpu_list, mask

        rank = os.environ.get("SLURM_PROCID")
        who = f"rank {rank}" if rank is not None else "this process"
        text += f"; {who} on CPUs {cpu_list(cpus)} (mask {mask(cpus)})"
    affinity = (info.get("cores_usable_sources") or {}).get("affinity")
    if job.cpus and affinity and affinity > job.cpus:
        return Check(
            "slurm_job",
            "warn",
            f"{text}; but this process may run on {affinity} cores: the node does not confine "
            "jobs (TaskPlugin=task/none?), so thread counts taken from the node oversubscribe",
            f"use {job.cpus} thread{'s' if job.cpus != 1 else ''} (hpclab does); admins: "
            "TaskPlugin=task/affinity,task/cgroup",
        )
    if job.time_left_s is not None and job.time_left_s < 600:
        return Check("slurm_job", "warn", f"{text}: save your work", "checkpoint now")
    return Check("slurm_job", "ok", text)


def _server_bind(info: dict[str, Any]) -> Check:
    """Whether this hub-spawned Jupyter server listens beyond loopback (chapter 07)."""
    from hpclab.measure.allocation import is_loopback, server_bind_host

    host = server_bind_host()
    if host is None:
        return Check("server_bind", "ok", "not a hub-spawned server")
    if is_loopback(host):
        return Check("server_bind", "ok", f"server listens on {host} only")
    return Check(
        "server_bind",
        "warn",
        f"server listens on {host}: other users of this network can reach its port "
        "(its token still guards it)",
        "admins: bind single-user servers to the interface the hub uses (Spawner.ip)",
    )


CHECKS: tuple[Callable[[dict[str, Any]], Check], ...] = (
    _gpu,
    _cuda_visible,
    _shm,
    _threads,
    _scratch,
    _root,
    _port,
    _reverse_dns,
    _results,
    _clock,
    _packages,
    _slurm_job,
    _server_bind,
)


def run_checks(info: dict[str, Any] | None = None) -> list[Check]:
    """Run every check on ``info`` (default: :func:`system_info`) (chapter 00)."""
    if info is None:
        from hpclab.measure.sysinfo import system_info

        info = system_info(refresh=True)  # the doctor reports the state now, not at import
    out = []
    for check in CHECKS:
        try:
            out.append(check(info))
        except Exception as exc:  # noqa: BLE001 - a broken check reports itself, never crashes
            name = check.__name__.lstrip("_")
            out.append(Check(name, "warn", f"check crashed: {type(exc).__name__}: {exc}", ""))
    return out


_MARK = {"ok": "[ok]  ", "warn": "[warn]", "fail": "[FAIL]"}


def format_report(checks: list[Check], info: dict[str, Any]) -> str:
    """Plain-text report: a few facts about the machine, then one line per check (chapter 00)."""
    gpus = info.get("gpus") or []
    gpu_text = ", ".join(f"{g.get('name')} ({_num(g.get('memory_gb'), 0)} GB)" for g in gpus)
    limit = info.get("mem_limit_gb")
    lines = [
        f"host      {info.get('host')}  ({info.get('os')}, Python {info.get('python')}, "
        f"torch {info.get('torch')})",
        f"CPU       {info.get('cpu_model')}, {info.get('cores_usable')} usable of "
        f"{info.get('cores_node')} cores ({info.get('cores_physical', '?')} physical), "
        f"SIMD {' '.join(info.get('simd') or []) or '-'}",
        f"clock     {_num(info.get('clock_ghz'))} GHz ({info.get('clock_method')})",
        *(f"peak {d:<5}{why}" for d, why in (info.get("peak_derivation") or {}).items()),
        f"memory    {_num(info.get('mem_total_gb'), 1)} GB total, "
        f"{_num(info.get('mem_available_gb'), 1)} GB available, "
        f"{f'job limit {limit:.1f} GB' if limit else 'no cgroup limit'}, "
        f"/dev/shm {_num(info.get('shm_gb'), 2)} GB",
        f"GPUs      {gpu_text or 'none'}",
        "",
    ]
    for c in checks:
        lines.append(f"{_MARK[c.level]} {c.name:<20} {c.message}")
        if c.fix and c.level != "ok":
            lines.append(f"{'':6} {'':<20} fix: {c.fix}")
    return "\n".join(_wrap(line) for line in lines)


REPORT_WIDTH = 96  # narrower than a notebook's output area: it never wraps a line itself


def _wrap(line: str, width: int = REPORT_WIDTH) -> str:
    """Wrap at spaces only (never inside a number or a word), continuing under the text column."""
    import textwrap

    if len(line) <= width:
        return line
    label = 28 if line.startswith("[") else 10  # the column where the text starts
    body = line[label:]
    return "\n".join(
        textwrap.wrap(
            body,
            width=width,
            initial_indent=line[:label],
            subsequent_indent=" " * label,
            break_long_words=False,
            break_on_hyphens=False,
        )
    )


def _num(x: float | None, digits: int = 2) -> str:
    return f"{x:.{digits}f}" if isinstance(x, (int, float)) else "?"
