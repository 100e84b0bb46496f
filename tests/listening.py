"""Nothing the course starts is reachable beyond its user: every listening socket is loopback.

The tests that start a server (the lab script, the hub, the local Slurm, the Celery broker,
SnakeViz, a multi-node run) call these helpers while it runs: :func:`assert_loopback_only` for
processes they know, :class:`Watch` for processes that come and go (a job's ranks). A listener on
``0.0.0.0``, ``::`` or a NIC's address fails the test with the process and port named.
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Callable, Iterable

import psutil

Listener = tuple[int, str, str, int]  # pid, process name, address, port


def _loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%")[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def listeners(pids: Iterable[int], tree: bool = True) -> list[Listener]:
    """TCP sockets in LISTEN state held by ``pids`` (and, with ``tree``, their descendants)."""
    procs: dict[int, psutil.Process] = {}
    for pid in pids:
        try:
            p = psutil.Process(pid)
            procs[pid] = p
            if tree:
                procs.update({c.pid: c for c in p.children(recursive=True)})
        except psutil.NoSuchProcess:
            continue
    out = set()
    for p in procs.values():
        try:
            conns = p.net_connections(kind="tcp")
            name = p.name()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for c in conns:
            if c.status == psutil.CONN_LISTEN:
                out.add((p.pid, name, c.laddr.ip, c.laddr.port))
    return sorted(out)


def exposed(found: Iterable[Listener]) -> list[Listener]:
    return [x for x in found if not _loopback(x[2])]


def assert_loopback_only(pids: Iterable[int], what: str, tree: bool = True) -> list[Listener]:
    """Fail if any of ``pids`` (with their descendants) listens beyond loopback; the listeners."""
    found = listeners(pids, tree)
    bad = exposed(found)
    assert not bad, f"{what} listens beyond loopback: " + ", ".join(
        f"{name} (pid {pid}) on {ip}:{port}" for pid, name, ip, port in bad
    )
    return found


class Watch:
    """Poll, in a thread, the listeners of every process whose command line contains ``mark``
    (e.g. a job's private directory) while the block runs; ``seen`` holds all of them."""

    def __init__(self, mark: str | Callable[[list[str]], bool], interval_s: float = 0.25):
        self.match = mark if callable(mark) else (lambda cmd: any(mark in a for a in cmd))
        self.interval_s = interval_s
        self.seen: set[Listener] = set()
        self.procs: set[tuple[int, str]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _poll(self) -> None:
        pids = []
        for p in psutil.process_iter(["pid", "name", "cmdline"]):
            cmd = p.info["cmdline"] or []
            if cmd and self.match(cmd):
                pids.append(p.info["pid"])
                self.procs.add((p.info["pid"], p.info["name"]))
        self.seen.update(listeners(pids, tree=False))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._poll()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def assert_loopback_only(self, what: str) -> None:
        bad = exposed(self.seen)
        assert not bad, f"{what} listened beyond loopback: " + ", ".join(
            f"{name} (pid {pid}) on {ip}:{port}" for pid, name, ip, port in bad
        )
