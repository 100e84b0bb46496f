"""Reading NCCL's ``NCCL_DEBUG=INFO`` log: what a job built, and which rank hung (chapter 06).

Every line NCCL writes at INFO level reads ``host:pid:tid [cudaDev] NCCL INFO message`` (NVIDIA
NCCL User Guide, Troubleshooting > Logging). At communicator init it says what it built:

- ``Ring CC : prev -> me -> next`` (or ``Channel CC/NN :  r0 r1 ...``, the whole ring order): the
  ring of channel CC; ``Trees [c] children->me->parent ...`` and ``Tree c : parent -> me ->
  children``: the trees, one per channel. NCCL builds both and picks one per call, by size.
- ``Channel CC/k : a[dev] -> b[dev] [send|receive] via TRANSPORT``: one hop and how it travels:
  ``P2P/...`` GPU to GPU inside a node (NVLink or PCIe), ``SHM`` through host memory,
  ``NET/IB/i[/GDRDMA]`` across nodes over InfiniBand NIC i (GDRDMA: the NIC reads GPU memory
  directly, GPUDirect RDMA), ``NET/Socket`` over plain TCP.
- ``N coll channels, C collnet channels, V nvls channels, P p2p channels``: how many parallel
  channels each kind of algorithm got; ``comm ... rank r nRanks n nNodes k``: the job's shape.

:func:`summary` pulls those out of any such log, :func:`annotate` explains one line of each
kind; :func:`init_log` is a real log to read them on (bundled, with its source in its header).

On a hang, PyTorch's ProcessGroupNCCL watchdog logs, on each rank that *waited*, "Watchdog
caught collective operation timeout: WorkNCCL(SeqNum=S, OpType=..." for the collective it is
stuck in. The rank that joined the communicator but reports no timeout had no collective in
flight: it never issued the one its peers wait in (:func:`silent_ranks`). The bundled hang
example, ``hpclab/references/nccl_hang_reconstructed.log``, is a reconstruction from those
formats, not a captured log (its header says so).
"""

from __future__ import annotations

import re
from importlib import resources

INIT = re.compile(r"NCCL INFO comm \S+ rank (\d+) nranks (\d+) .*Init (?:START|COMPLETE)")
TIMEOUT = re.compile(
    r"\[Rank (\d+)\] Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+)"
)
REFERENCE = "nccl_hang_reconstructed.log"
INIT_LOG = "nccl_init_nvidia_nccl_1189.log"  # NVIDIA/nccl#1189, 2 nodes x 2 H20, InfiniBand

LINE = re.compile(r"^(?P<host>[^\s:]+):\d+:\d+ \[\d+\] NCCL INFO (?P<msg>.*)$", re.M)
VERSION = re.compile(r"^(?:\S+ \[\d+\] NCCL INFO )?NCCL version (\S+)", re.M)
RING = re.compile(r"^Ring (\d+) : (-?\d+) -> (\d+) -> (-?\d+)$")  # prev -> me -> next
RING_ORDER = re.compile(r"^Channel (\d+)/\d+ :((?:\s+\d+)+)\s*$")  # the whole ring
TREES = re.compile(r"^Trees((?: \[\d+\] \S+)+)")  # [c] child/child/child->me->parent
HOP = re.compile(
    r"^Channel (\d+)(?:/\d+)? : (\d+)\[[0-9a-f]+\] -> (\d+)\[[0-9a-f]+\]"
    r"(?: \[(send|receive)\])? via (\S+)"
)
CHANNELS = re.compile(
    r"^(\d+) coll channels, (?:(\d+) collnet channels, )?(?:(\d+) nvls channels, )?"
    r"(\d+) p2p channels"
)
SHAPE = re.compile(r"\brank (\d+) nRanks (\d+) nNodes (\d+)")
COMPLETE = re.compile(r"\brank (\d+) nranks (\d+) .*Init COMPLETE")
ENV_SET = re.compile(r"^(NCCL_\w+) set (?:by environment )?to (\S+?)\.?$")
ENV_ARG = re.compile(r"\b(NCCL_[A-Z_]+)=(\S+)")


def init_log() -> str:
    """A real ``NCCL_DEBUG=INFO`` log of communicator init on 2 nodes (read its header first)."""
    return (resources.files("hpclab") / "references" / INIT_LOG).read_text()


def transport(via: str) -> tuple[str, int | None, bool]:
    """``via`` of a hop line -> (kind, NIC index or None, GPUDirect RDMA?): ``NET/IB/3/GDRDMA``
    -> ("NET/IB", 3, True); ``P2P/CUMEM`` -> ("P2P", None, False)."""
    parts = via.split("/")
    if parts[0] == "NET" and len(parts) > 1:
        nic = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else None
        return "/".join(parts[:2]), nic, "GDRDMA" in parts
    return parts[0], None, False


def summary(text: str) -> dict:
    """What an ``NCCL_DEBUG=INFO`` log says the job built (None or empty where it does not say):
    ``version``, ``hosts``, ``nranks``, ``nodes``; ``rings`` {channel: {rank: (prev, next)}}
    and ``ring_channels``; ``tree_channels`` (channels in the longest ``Trees`` line);
    ``coll_channels``, ``collnet_channels``, ``nvls_channels``, ``p2p_channels``; ``hops``
    {transport kind: hop lines}, ``nics`` (NET NIC indices), ``gpudirect_rdma``;
    ``init_complete`` (ranks); ``env`` (NCCL_* settings the log or its command line shows)."""
    out: dict = {"version": None, "nranks": None, "nodes": None, "tree_channels": 0}
    out.update(coll_channels=None, collnet_channels=None, nvls_channels=None, p2p_channels=None)
    hosts, done, nics = set(), set(), set()
    rings: dict[int, dict[int, tuple[int, int]]] = {}
    hops: dict[str, int] = {}
    gdr = False
    env = {m.group(1): m.group(2) for m in ENV_ARG.finditer(text)}
    if m := VERSION.search(text):
        out["version"] = m.group(1)
    for line in LINE.finditer(text):
        hosts.add(line.group("host"))
        msg = line.group("msg").strip()
        if m := RING.match(msg):
            rings.setdefault(int(m.group(1)), {})[int(m.group(3))] = (
                int(m.group(2)),
                int(m.group(4)),
            )
        elif m := RING_ORDER.match(msg):
            order = [int(r) for r in m.group(2).split()]
            for i, r in enumerate(order):  # the whole ring: each rank's neighbours
                rings.setdefault(int(m.group(1)), {})[r] = (
                    order[i - 1],
                    order[(i + 1) % len(order)],
                )
        elif m := TREES.match(msg):
            out["tree_channels"] = max(out["tree_channels"], m.group(1).count("["))
        elif m := HOP.match(msg):
            kind, nic, rdma = transport(m.group(5))
            hops[kind] = hops.get(kind, 0) + 1
            if nic is not None:
                nics.add(nic)
            gdr = gdr or rdma
        elif m := CHANNELS.match(msg):
            keys = ("coll_channels", "collnet_channels", "nvls_channels", "p2p_channels")
            out.update({k: int(v) for k, v in zip(keys, m.groups(), strict=True) if v})
        elif m := ENV_SET.match(msg):
            env[m.group(1)] = m.group(2)
        if m := SHAPE.search(msg):
            out.update(nranks=int(m.group(2)), nodes=int(m.group(3)))
        if m := COMPLETE.search(msg):
            done.add(int(m.group(1)))
            out["nranks"] = out["nranks"] or int(m.group(2))
    out.update(hosts=sorted(hosts), rings=rings, ring_channels=sorted(rings), hops=hops)
    out.update(nics=sorted(nics), gpudirect_rdma=gdr, init_complete=sorted(done), env=env)
    if out["nodes"] is None and hosts:
        out["nodes"] = len(hosts)
    return out


TRANSPORTS = {
    "P2P": "GPU to GPU inside the node (NVLink or PCIe peer-to-peer)",
    "SHM": "through host shared memory (no peer-to-peer path)",
    "NET/IB": "across nodes over InfiniBand or RoCE",
    "NET/Socket": "across nodes over plain TCP sockets (no InfiniBand found: slow)",
}


def _explain(msg: str) -> tuple[str, str] | None:
    """(kind, what it says) for one message of a kind worth reading, else None."""
    if m := re.match(r"Bootstrap ?: Using (\S+?):", msg):
        return "bootstrap", f"ranks first meet over interface {m.group(1)} (NCCL_SOCKET_IFNAME)"
    if m := re.match(r"Using network (\S+)", msg):
        return "network", f"transport across nodes: {m.group(1)}"
    if m := RING.match(msg):
        c, prev, me, nxt = m.groups()
        return "ring", f"ring channel {int(c)}: rank {me} receives from {prev}, sends to {nxt}"
    if m := RING_ORDER.match(msg):
        return "ring", f"ring channel {int(m.group(1))} visits ranks{m.group(2)}"
    if m := TREES.match(msg):
        items = m.group(1).split()  # "[c]", "1/2/-1->0->-1" (children -> me -> parent), ...
        trees = [
            (int(c.strip("[]")), t.split("->"))
            for c, t in zip(items[::2], items[1::2], strict=True)
        ]
        c, (kids, me, parent) = next((t for t in trees if t[1][0] != "-1/-1/-1"), trees[0])
        children = [int(k) for k in kids.split("/") if k != "-1"]
        return "trees", (
            f"{len(trees)} tree channels; in tree {c} rank {me} has children {children} "
            f"and parent {parent} (-1: it is the root)"
        )
    if m := HOP.match(msg):
        c, a, b, way, via = m.groups()
        kind, nic, rdma = transport(via)
        what = TRANSPORTS.get(kind, kind)
        extra = (f", NIC {nic}" if nic is not None else "") + (", GPUDirect RDMA" if rdma else "")
        return f"hop {kind}", f"channel {int(c)}: rank {a} -> rank {b} {what}{extra}"
    if m := CHANNELS.match(msg):
        coll, collnet, nvls, p2p = m.groups()
        return "channels", (
            f"{coll} channels for collectives (its rings and trees), {collnet or 0} CollNet "
            f"(in-switch, SHARP), {nvls or 0} NVLS (NVSwitch), {p2p} for send/recv"
        )
    if m := SHAPE.search(msg):
        return "shape", f"rank {m.group(1)} of {m.group(2)} ranks on {m.group(3)} nodes"
    if m := COMPLETE.search(msg):
        return "init", f"rank {m.group(1)} of {m.group(2)} has its communicator"
    if m := ENV_SET.match(msg):
        return f"env {m.group(1)}", f"{m.group(1)}={m.group(2)} came from the environment"
    return None


def annotate(text: str) -> list[dict[str, str]]:
    """The first line of each kind worth reading in a log (hops once per transport), with
    what it says: rows ``kind``, ``line`` (the message after ``NCCL INFO``) and ``says``."""
    rows, seen = [], set()
    for line in LINE.finditer(text):
        msg = line.group("msg").strip()
        got = _explain(msg)
        if got and got[0] not in seen:
            seen.add(got[0])
            rows.append({"kind": got[0], "line": msg, "says": got[1]})
    return rows


def reference_log() -> str:
    """The bundled, reconstructed log of a 4-rank hang (read its header first)."""
    return (resources.files("hpclab") / "references" / REFERENCE).read_text()


def silent_ranks(text: str) -> dict[str, list[int]]:
    """From a job's combined log: ``ranks`` (every rank of the communicator, from its Init
    lines), ``waited`` (ranks whose watchdog timed out in a collective) and ``silent`` (the
    others: the ranks to inspect). Empty lists when the log shows no Init or no timeout."""
    ranks: set[int] = set()
    for m in INIT.finditer(text):  # each Init line says its rank and the communicator's size
        ranks |= set(range(int(m.group(2))))
    waited = {int(m.group(1)) for m in TIMEOUT.finditer(text)}
    silent = sorted(ranks - waited) if waited else []
    return {"ranks": sorted(ranks), "waited": sorted(waited), "silent": silent}
