"""What one rank holds and sends during a step, measured from inside torch (chapter 09, part 2).

:class:`StepProbe` is a ``TorchDispatchMode``: every operator a rank runs inside it passes
through :meth:`StepProbe.__torch_dispatch__`, the collectives included (``c10d::allreduce_``,
``_allgather_base_``, ``_reduce_scatter_base_``, ``broadcast_``: the ops DDP's reducer, FSDP2,
``ZeroRedundancyOptimizer`` and :mod:`hpclab.sharding.zero1` all end in). So it sees what no
wrapper's own counters would show the same way for all four strategies:

- **bytes communicated**: each collective's payload, added to a
  :class:`hpclab.parallel.tensor_parallel.CommTally` (chapter 06's tally; an all-gather's
  payload is the slice a rank hands in, a reduce-scatter's the whole tensor it reduces), and
  to one tally per process group (``groups``, keyed by the group's global ranks: HSDP's
  intra-node and inter-node groups apart, :meth:`StepProbe.sent_by_group`);
- **live bytes and their peak**: every storage the step allocates is counted while it lives
  (a weak reference) at its current size, on top of the state tensors alive when the probe
  starts.
  CPU tensors have no allocator statistics (``torch.cuda.max_memory_allocated`` is CUDA's), so
  this is how the peak within a step is measured on CPU ranks. What a C++ component allocated
  before the probe started (DDP's gradient buckets) is not seen.

:func:`state_bytes` is the steady state between steps: the bytes of the parameters, gradients
and optimizer states one rank holds, each storage once (FSDP2's DTensors are read through their
local shard).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from hpclab.parallel.tensor_parallel import CommTally

# c10d op -> (tally kind, index of the argument whose bytes are the payload)
COLLECTIVES = {
    "allreduce_": ("all_reduce", 0),
    "_allgather_base_": ("all_gather", 1),
    "allgather_into_tensor_coalesced_": ("all_gather", 1),
    "_reduce_scatter_base_": ("reduce_scatter", 1),
    "reduce_scatter_tensor_coalesced_": ("reduce_scatter", 1),
    "broadcast_": ("broadcast", 0),
}


def group_ranks(args: Any) -> tuple[int, ...]:
    """The global ranks of the process group a c10d op's arguments name (``()``: none). In a
    dispatch mode the group arrives boxed as a TorchScript object; ``ProcessGroup.unbox``
    returns the Python one."""
    import torch.distributed as dist

    for a in args:
        if isinstance(a, torch.ScriptObject) and "ProcessGroup" in str(a._type()):
            return tuple(dist.get_process_group_ranks(dist.ProcessGroup.unbox(a)))
    return ()


def local(t: torch.Tensor) -> torch.Tensor:
    """The tensor that owns memory on this rank: a DTensor's local shard, else ``t``."""
    inner = getattr(t, "_local_tensor", None)
    return inner if isinstance(inner, torch.Tensor) else t


def _nbytes(arg: Any) -> int:
    leaves, _ = tree_flatten(arg)
    return sum(t.numel() * t.element_size() for t in leaves if isinstance(t, torch.Tensor))


def _storage(t: torch.Tensor) -> torch.UntypedStorage | None:
    if local(t).device.type == "meta":  # a shape with no memory behind it (meta-device init)
        return None
    try:
        st = local(t).untyped_storage()
    except (RuntimeError, NotImplementedError):  # a wrapper with no storage of its own
        return None
    return st if st.nbytes() else None


def state_tensors(model: torch.nn.Module, optimizer: Any) -> list[torch.Tensor]:
    """Parameters, gradients and optimizer-state tensors (an inner optimizer looked through)."""
    params = list(model.parameters())
    out = params + [p.grad for p in params if p.grad is not None]
    opt = getattr(optimizer, "optim", None) or getattr(optimizer, "inner", None) or optimizer
    for state in opt.state.values():
        out += [v for v in state.values() if isinstance(v, torch.Tensor) and v.dim() > 0]
    for extra in getattr(optimizer, "held", lambda: [])():  # e.g. ZeRO-1's flat buffers
        out.append(extra)
    return out


def state_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (a view shares its base's bytes)."""
    seen: dict[int, int] = {}
    for t in tensors:
        st = _storage(t)
        if st is not None:
            seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


class StepProbe(TorchDispatchMode):
    """Counts collective payloads into ``tally`` and tracks live bytes (``now``, ``peak``)."""

    def __init__(self, tally: CommTally, alive: Iterable[torch.Tensor] = ()) -> None:
        super().__init__()
        self.tally = tally
        self.groups: dict[tuple[int, ...], CommTally] = {}
        self.live: dict[int, weakref.ref] = {}
        self.now = self.peak = 0
        for t in alive:
            self._track(t)
        self._count()

    def sent_by_group(self) -> dict[tuple[int, ...], float]:
        """Bytes this rank sent in each process group, counted as a ring of that group's size
        sends them (:meth:`CommTally.ring_bytes_per_rank`)."""
        return {g: t.ring_bytes_per_rank(len(g)) for g, t in self.groups.items()}

    def _track(self, t: torch.Tensor) -> None:
        st = _storage(t)
        # keyed by the storage object, not its address: a storage resized to 0 keeps its entry
        # while the allocator hands its old address to the next tensor
        if st is not None and st._cdata not in self.live:
            key = st._cdata
            self.live[key] = weakref.ref(st, lambda _ref, key=key: self.live.pop(key, None))

    def _count(self) -> None:
        # summed afresh after every op: FSDP2 frees a gathered parameter by resizing its
        # storage to 0 bytes (the storage object lives on), which no free callback would see
        self.now = sum(st.nbytes() for ref in list(self.live.values()) if (st := ref()))
        self.peak = max(self.peak, self.now)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace == "c10d":
            kind = COLLECTIVES.get(func.__name__.split(".")[0])
            if kind is not None:
                payload = _nbytes(args[kind[1]])
                group = self.groups.setdefault(group_ranks(args), CommTally())
                for tally in (self.tally, group):
                    tally.calls[kind[0]] += 1
                    tally.payload_bytes[kind[0]] += payload
        inputs = {
            st._cdata
            for t in tree_flatten((args, kwargs))[0]
            if isinstance(t, torch.Tensor) and (st := _storage(t)) is not None
        }
        out = func(*args, **kwargs)
        for t in tree_flatten(out)[0]:
            # a view or an in-place result shares an input's storage: nothing new was allocated
            # (a batch sliced from the data set must not count the whole data set)
            st = _storage(t) if isinstance(t, torch.Tensor) else None
            if st is not None and st._cdata not in inputs:
                self._track(t)
        self._count()
        return out
