"""The scaling model of data-parallel training (chapter 06, "Multi-GPU data parallel").

One step on n GPUs = compute of the per-GPU batch + the exposed part of a ring all-reduce of
the gradients::

    allreduce(m, n) = 2(n-1) * alpha + 2(n-1)/n * m / B          (ring: Patarasuk & Yuan 2009;
                                                                  the factor nccl-tests uses)
    compute(b)      = max(floor, compute_at_batch * b / batch)   (a GPU under-filled by a small
                                                                  batch does not get faster)
    step(n)         = compute + allreduce - min(overlap * allreduce, compute)

``alpha`` is the per-message latency (s), ``B`` the per-link bandwidth (bytes/s), ``m`` the
gradient bytes, ``overlap`` the fraction of the all-reduce hidden behind the backward pass.
Within a node the link is ``link``; beyond ``gpus_per_node`` the ring crosses the network, and
the slowest link sets its pace. Across nodes the rings share the node's ``nics_per_node`` NICs
(NCCL runs a ring per NIC), so the network hop runs at ``nics_per_node x`` one NIC's bandwidth,
capped by the link inside (default 1 NIC: one network link per ring). One simplification: one
flat ring (NCCL picks a tree, ~2 log2(n) latency terms, for small messages at large n, so
latency-bound cases come out too slow). The node in more detail (NVSwitch, rails, hierarchical
and in-network all-reduce, NVLS/SHARP) is :mod:`hpclab.ddp.fabric`. Presets name their sources;
alpha values are typical orders of magnitude (stated as such): measure yours with
``hpclab run allreduce``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Link:
    bandwidth_gbps: float  # spec bandwidth per direction, GB/s (1e9 bytes/s)
    alpha_us: float  # per-message latency, microseconds
    source: str


# Per-direction x16 PCIe bandwidth: lanes x GT/s x 128b/130b encoding / 8 bits (PCI-SIG specs).
LINKS: dict[str, Link] = {
    "pcie3": Link(15.75, 10.0, "PCI-SIG PCIe 3.0: 8 GT/s x 16 lanes, 128b/130b"),
    "pcie4": Link(31.5, 10.0, "PCI-SIG PCIe 4.0: 16 GT/s x 16 lanes, 128b/130b"),
    "pcie5": Link(63.0, 10.0, "PCI-SIG PCIe 5.0: 32 GT/s x 16 lanes, 128b/130b"),
    "pcie-switch-mao2015": Link(
        6.0, 10.0, "Mao 2015 (SHARCNET, Monk topology): PCI-E switch ~6 GB/s"
    ),
    "nvlink-v100": Link(
        150.0, 5.0, "NVIDIA V100 datasheet: NVLink 2, 300 GB/s total (both directions)"
    ),
    "nvlink-a100": Link(300.0, 5.0, "NVIDIA A100 datasheet: NVLink 3, 600 GB/s total"),
    "nvlink-h100": Link(450.0, 5.0, "NVIDIA H100 SXM datasheet: NVLink 4, 900 GB/s total"),
    "nvlink-b200": Link(900.0, 5.0, "NVIDIA B200 datasheet: NVLink 5, 1,800 GB/s total"),
    "ib-edr": Link(12.5, 2.0, "InfiniBand EDR 4x: 100 Gb/s"),
    "ib-hdr": Link(25.0, 2.0, "InfiniBand HDR 4x: 200 Gb/s"),
    "ib-ndr": Link(50.0, 2.0, "InfiniBand NDR 4x: 400 Gb/s"),
    "ib-xdr": Link(100.0, 2.0, "InfiniBand XDR 4x: 800 Gb/s"),
    "slingshot-11": Link(25.0, 2.0, "HPE Slingshot-11 (Perlmutter): 200 Gb/s per NIC"),
    "roce-400g": Link(50.0, 3.0, "RoCE v2 over 400 Gigabit Ethernet: 400 Gb/s"),
    "ib-mao2015": Link(5.0, 2.0, "Mao 2015 (SHARCNET, Monk): InfiniBand network ~5 GB/s"),
    "eth-10g": Link(1.25, 30.0, "10 Gigabit Ethernet: 10 Gb/s"),
    "eth-25g": Link(3.125, 30.0, "25 Gigabit Ethernet: 25 Gb/s"),
}
ALPHA_NOTE = "alpha: typical small-message latency (assumption, order of magnitude)"
# DESIGN.md reference figures: ~80% of a link's spec is a good all-reduce result.
DEFAULT_LINK_EFFICIENCY = 0.8


@dataclass(frozen=True)
class Workload:
    params: float  # trainable parameters
    batch: int  # batch (per GPU for weak scaling, global for strong) at which compute was timed
    compute_ms: float  # one step's compute at ``batch`` on one GPU
    floor_ms: float  # smallest step compute, however small the per-GPU batch
    scaling: str  # how the source scaled: "weak" (batch per GPU) or "strong" (global batch)
    reference: str  # bundled reference to overlay ("" = none)
    source: str


WORKLOADS: dict[str, Workload] = {
    # Guan 2019: "~3 million trainable parameters"; Keras on one V100, batch 256, 20000 steps in
    # 128 s -> 6.4 ms/step. Floor = that step: a batch of 256 small images under-fills a V100,
    # so splitting it does not make a GPU's share faster (the deck's own hypothesis).
    "mnist-guan2019": Workload(
        3e6,
        256,
        6.4,
        6.4,
        "strong",
        "guan2019_mnist_multigpu",
        "Guan 2019, Keras MNIST on V100 (128 s / 20000 steps)",
    ),
    # Guan 2019: ResNet-50, "23 million trainable parameters", 345 img/s on 1 V100 at batch 128.
    "resnet50-guan2019": Workload(
        23e6,
        128,
        128 / 345 * 1e3,
        0.0,
        "strong",
        "guan2019_resnet50_v100",
        "Guan 2019, ResNet-50 on V100, 345 img/s",
    ),
    # Guan 2019's Horovod table: batch 32 per GPU, 322.93 img/s on 2 GPUs -> 161.5 img/s per GPU
    # (that run's communication is inside this compute figure: an approximation).
    "horovod-resnet50-guan2019": Workload(
        23e6,
        32,
        32 / (322.93 / 2) * 1e3,
        0.0,
        "weak",
        "guan2019_horovod_resnet50",
        "Guan 2019, Horovod ResNet-50, 32 img per GPU",
    ),
}


def ring_allreduce_s(nbytes: float, n: int, alpha_s: float, bandwidth_bps: float) -> float:
    """Ring all-reduce time: 2(n-1) latency terms + 2(n-1)/n of the message per link."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) * alpha_s + 2 * (n - 1) / n * nbytes / bandwidth_bps


def step_s(compute_s: float, comm_s: float, overlap: float = 0.0) -> float:
    """Step time when ``overlap`` of the all-reduce hides behind compute (never more than it)."""
    hidden = min(overlap * comm_s, compute_s)
    return compute_s + comm_s - hidden


def compute_s(workload: Workload, per_gpu_batch: float) -> float:
    """Per-GPU compute time for ``per_gpu_batch`` samples (linear in batch, with a floor)."""
    return max(workload.floor_ms, workload.compute_ms * per_gpu_batch / workload.batch) / 1e3


def fit_alpha_beta(nbytes: list[float], seconds: list[float], n: int) -> tuple[float, float]:
    """Fit measured all-reduce times to the ring model; returns (alpha_s, bandwidth_bps).

    Least squares on ``t = a + b*m`` weighted by 1/t (relative error: sizes span 7 orders of
    magnitude, and an unweighted fit would ignore every small message). Then
    ``alpha = a / (2(n-1))`` and ``B = 2(n-1)/n / b``.
    """
    if n < 2:
        raise ValueError("an all-reduce needs n >= 2 ranks to fit")
    m = np.asarray(nbytes, dtype=float)
    t = np.asarray(seconds, dtype=float)
    if len(m) < 2 or len(set(m.tolist())) < 2:
        raise ValueError("need at least two different message sizes to fit alpha and beta")
    w = 1.0 / t
    design = np.stack([np.ones_like(m), m], axis=1) * w[:, None]
    (a, b), *_ = np.linalg.lstsq(design, t * w, rcond=None)
    a, b = max(float(a), 0.0), float(b)
    if b <= 0:  # only latency-bound sizes (or noise): the biggest message bounds B from below
        b = float(t[np.argmax(m)] / m.max())
    return a / (2 * (n - 1)), 2 * (n - 1) / n / b


@dataclass(frozen=True)
class Prediction:
    gpus: int
    per_gpu_batch: float
    compute_s: float
    comm_s: float
    step_s: float
    samples_per_s: float
    efficiency: float
    link: str


def predict(
    workload: Workload,
    gpus: int,
    scaling: str,
    link: str,
    network: str,
    gpus_per_node: int,
    overlap: float = 0.0,
    bytes_per_param: int = 4,
    link_efficiency: float = DEFAULT_LINK_EFFICIENCY,
    alpha_us: float | None = None,
    bandwidth_gbps: float | None = None,
    nics_per_node: int = 1,
) -> Prediction:
    """Predicted step on ``gpus`` GPUs; efficiency = throughput / (gpus x one GPU's)."""
    if gpus < 1:
        raise ValueError(f"gpus={gpus} must be >= 1")
    if gpus <= gpus_per_node:
        chosen = LINKS[link]
    else:
        chosen = slowest_link(LINKS[link], rings_per_nic(LINKS[network], nics_per_node))
    name = link if gpus <= gpus_per_node else f"{network} (across nodes)"
    alpha = (chosen.alpha_us if alpha_us is None else alpha_us) * 1e-6
    bw = chosen.bandwidth_gbps * link_efficiency if bandwidth_gbps is None else bandwidth_gbps
    global_batch = workload.batch * gpus if scaling == "weak" else workload.batch
    per_gpu = global_batch / gpus
    comp = compute_s(workload, per_gpu)
    comm = ring_allreduce_s(workload.params * bytes_per_param, gpus, alpha, bw * 1e9)
    step = step_s(comp, comm, overlap)
    # One GPU runs ``workload.batch`` (the global batch for strong, one GPU's for weak scaling).
    one_rate = workload.batch / compute_s(workload, workload.batch)
    rate = global_batch / step
    return Prediction(gpus, per_gpu, comp, comm, step, rate, rate / (gpus * one_rate), name)


def rings_per_nic(nic: Link, nics: int) -> Link:
    """The network a node's rings see: one ring per NIC, so ``nics x`` one NIC's bandwidth."""
    if nics < 1:
        raise ValueError(f"nics_per_node={nics} must be >= 1")
    return Link(nic.bandwidth_gbps * nics, nic.alpha_us, nic.source)


def slowest_link(a: Link, b: Link) -> Link:
    """A ring is as fast as its slowest hop and as slow as its slowest latency."""
    return Link(min(a.bandwidth_gbps, b.bandwidth_gbps), max(a.alpha_us, b.alpha_us), "")


def powers_of_two(lo: int, hi: int) -> tuple[int, ...]:
    return tuple(2**k for k in range(int(math.log2(lo)), int(math.log2(hi)) + 1))
