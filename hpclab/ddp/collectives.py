"""Tree and recursive-doubling all-reduce from send/recv, beside the ring (chapter 06).

Same signature as :func:`hpclab.ddp.ring.ring_allreduce`: ``f(tensor, rank, world_size)`` sums
``tensor`` over all ranks in place and returns it. Torch's gloo backend runs its own algorithm
with no switch to pick another, so these are the teaching versions of the classic MPI ones
(Thakur, Rabenseifner & Gropp 2005, "Optimization of Collective Communication Operations in
MPICH", IJHPCA 19(1)), written for reading: blocking steps, whole messages, no pipelining.

- **Tree** (binomial tree): a reduce to rank 0 in ceil(log2 n) steps (at step k the ranks with
  bit k set send their partial sum to ``rank - 2**k`` and drop out), then a broadcast from rank
  0 down the same tree. Every step moves the whole message: 2 ceil(log2 n) steps of m bytes.
  Few steps, but the root's link carries the full message 2 log2 n times.
- **Recursive doubling**: at step k every rank swaps its whole partial sum with
  ``rank XOR 2**k`` and adds; after log2 n steps every rank holds the total. A rank count that
  is not a power of two gets the standard fix-up (Thakur et al. 2005, section 4.1): with
  ``p' = 2**floor(log2 n)`` and ``r = n - p'``, the first ``2r`` ranks pair up, each even one
  hands its vector to its odd neighbour and sits out; the ``p'`` remaining ranks double; the odd
  ones hand the result back. floor(log2 n) (+2 with the fix-up) steps of m bytes.

The alpha-beta cost of each, and the ring's, is in :mod:`hpclab.ddp.collective_model`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from hpclab.ddp.ring import ring_allreduce
from hpclab.ddp.scratch import receive_buffer


def _exchange(send: torch.Tensor, recv: torch.Tensor, peer: int) -> None:
    """Send ``send`` to ``peer`` while receiving ``recv`` from it (isend: no deadlock)."""
    import torch.distributed as dist

    req = dist.isend(send, dst=peer)
    dist.recv(recv, src=peer)
    req.wait()


def tree_allreduce(tensor: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Sum ``tensor`` over all ranks in place: binomial-tree reduce to rank 0, then broadcast."""
    import torch.distributed as dist

    n = world_size
    if n == 1 or tensor.numel() == 0:
        return tensor
    flat = tensor.view(-1)
    box = receive_buffer(flat, flat.numel())  # reused: no new pages per call
    mask = 1
    while mask < n:  # reduce: children send up, parents add
        if rank & mask:
            dist.send(flat, dst=rank - mask)
            break
        if rank + mask < n:
            dist.recv(box, src=rank + mask)
            flat.add_(box)
        mask <<= 1
    mask = 1 << (n - 1).bit_length()  # broadcast: the same tree, top down
    while mask > 1:
        mask >>= 1
        if rank % (2 * mask) == 0 and rank + mask < n:
            dist.send(flat, dst=rank + mask)
        elif rank % (2 * mask) == mask:
            dist.recv(flat, src=rank - mask)
    return tensor


def doubling_allreduce(tensor: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Sum ``tensor`` over all ranks in place by recursive doubling (with the fix-up for n not a
    power of two)."""
    import torch.distributed as dist

    n = world_size
    if n == 1 or tensor.numel() == 0:
        return tensor
    flat = tensor.view(-1)
    box = receive_buffer(flat, flat.numel())  # reused: no new pages per call
    pof2 = 1 << (n.bit_length() - 1)  # largest power of two <= n
    extra = n - pof2
    # Fix-up in: among ranks < 2*extra, even ranks fold into their odd neighbour and sit out.
    if rank < 2 * extra:
        if rank % 2 == 0:
            dist.send(flat, dst=rank + 1)
            new = -1
        else:
            dist.recv(box, src=rank - 1)
            flat.add_(box)
            new = rank // 2
    else:
        new = rank - extra
    if new >= 0:
        mask = 1
        while mask < pof2:
            peer_new = new ^ mask
            peer = peer_new * 2 + 1 if peer_new < extra else peer_new + extra
            _exchange(flat, box, peer)
            flat.add_(box)  # a + b == b + a in IEEE: both partners hold the same bits
            mask <<= 1
    # Fix-up out: the odd ranks hand the total back to the even ones that sat out.
    if rank < 2 * extra:
        if rank % 2:
            dist.send(flat, dst=rank - 1)
        else:
            dist.recv(flat, src=rank + 1)
    return tensor


AllReduce = Callable[[torch.Tensor, int, int], torch.Tensor]

# The hand-written algorithms by the name ``hpclab run allreduce --algorithm`` takes.
ALGORITHMS: dict[str, AllReduce] = {
    "ring": ring_allreduce,
    "tree": tree_allreduce,
    "doubling": doubling_allreduce,
}
