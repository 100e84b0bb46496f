"""Bytes one rank sends per step, by strategy and by where they go (chapter 09, part 2, §6).

Data parallelism's collectives, counted as a ring sends them (nccl-tests' convention): per rank,
an all-reduce of ``B`` bytes over ``n`` ranks sends ``2 (n-1)/n B``, an all-gather or a
reduce-scatter of a ``B``-byte whole ``(n-1)/n B``. With ``Psi`` parameters, ``w`` bytes a
gathered weight and ``g`` bytes a reduced gradient, on ``N`` ranks (Rajbhandari et al. 2020 §7)::

    DDP, ZeRO-1, ZeRO-2   2 (N-1)/N  g Psi         (ZeRO-1/2: reduce-scatter + all-gather)
    ZeRO-3                (N-1)/N (2 w + g) Psi    (all-gather in forward and again in backward,
                                                    reduce-scatter of the gradients: 1.5x DDP)
    torch's ZeRO-1        3 (N-1)/N  g Psi         (DDP's all-reduce, then broadcasts)

**HSDP** (hybrid sharding: Zhao et al. 2023, "PyTorch FSDP", §3.2; PyTorch's ``fully_shard``
on a 2-D ``DeviceMesh`` with dimensions ``("replicate", "shard")``) splits the N = R x S ranks
into R replicas (the nodes) of S ranks (a node's GPUs): ZeRO-3 inside each node, and each shard
all-reduced across the R replicas::

    inside a node     (S-1)/S (2 w + g) Psi        ZeRO-3 over the node's S ranks
    across nodes      2 (R-1)/R  g Psi / S         all-reduce of one shard's gradient

State per rank: ZeRO-3's over S ranks, ``(w + g + K) Psi / S``, not over N.

Where they go: a collective whose group holds ranks of more than one node runs at the pace of
the links between nodes (a ring is as fast as its slowest hop), so its bytes count as
**inter-node**; a group inside one node is **intra-node** (NVLink, or here shared memory).
This is what an HPC engineer compares: across nodes ZeRO-3 sends 3 (N-1)/N x the model's bytes
(1.5x DDP's all-reduce), HSDP only 2 (R-1)/R x a 1/S shard. Ranks are numbered node by node, as
torchrun numbers them: rank r lives on node r // S.
"""

from __future__ import annotations

from collections.abc import Iterable

WORLD_STRATEGIES = {  # strategy -> (all-gathers of weights, all-reduces of gradients) over N
    "ddp": (0, 1),
    "zero1": (0, 1),
    "zero2": (0, 1),
    "zero1-torch": (0, 1.5),  # the all-reduce, then broadcasts of as much: (N-1)/N g Psi
    "zero3": (2, 0.5),  # two all-gathers, one reduce-scatter (half an all-reduce)
    "zero3-bf16": (2, 0.5),
}


def check_nodes(ranks: int, nodes: int) -> int:
    """Ranks per node; a one-line ValueError naming the node counts that divide ``ranks``."""
    if nodes < 1 or ranks % nodes:
        allowed = [n for n in range(1, ranks + 1) if ranks % n == 0]
        raise ValueError(
            f"ranks={ranks} do not split evenly over nodes={nodes} (hsdp keeps one replica a "
            f"node, ranks / nodes shards in each); allowed: nodes in {{{', '.join(map(str, allowed))}}}"
        )
    return ranks // nodes


def comm_bytes(
    strategy: str, params: float, ranks: int, nodes: int = 1, weight: float = 4, grad: float = 4
) -> dict[str, float]:
    """Bytes one rank sends per step inside its node and across nodes (module docstring)."""
    per_node = check_nodes(ranks, nodes)
    if strategy == "hsdp":
        s, r = per_node, nodes
        intra = (s - 1) / s * (2 * weight + grad) * params
        inter = 2 * (r - 1) / r * grad * params / s
        return {"intra_node": intra, "inter_node": inter, "total": intra + inter}
    if strategy not in WORLD_STRATEGIES:
        raise ValueError(f"strategy={strategy!r}; allowed: hsdp, {', '.join(WORLD_STRATEGIES)}")
    gathers, reduces = WORLD_STRATEGIES[strategy]
    if strategy == "zero3-bf16":
        weight = 2  # MixedPrecisionPolicy(param_dtype=bf16): the all-gathers move 2 bytes
    total = (ranks - 1) / ranks * (gathers * weight + 2 * reduces * grad) * params
    where = "inter_node" if nodes > 1 else "intra_node"
    return {"intra_node": 0.0, "inter_node": 0.0, where: total, "total": total}


def shard_ranks(strategy: str, ranks: int, nodes: int = 1) -> int:
    """How many ranks share (shard) the state of ZeRO-3 / HSDP: all of them, or one node's."""
    return check_nodes(ranks, nodes) if strategy == "hsdp" else ranks


def spans_nodes(group: Iterable[int], per_node: int) -> bool:
    """Whether a process group (its global ranks) holds ranks of more than one node."""
    return len({r // per_node for r in group}) > 1
