"""What a student's distributed function communicates, seen from its own rank (the checks of
chapter 06's ring all-reduce and of 06 part 2's column-split layer).

A check that compares only the result is fooled by a method that gives the same result the wrong
way (``dist.all_reduce`` inside a "ring", the whole weight gathered where only output slices
should move). While a :class:`CommProbe` is active, the ``torch.distributed`` calls below are
recorded before they run: which one, the peer, and the tensors this rank contributes.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

POINT_TO_POINT = ("send", "isend", "recv", "irecv")
COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce",
    "broadcast",
    "gather",
    "scatter",
    "all_to_all",
    "all_to_all_single",
    "all_gather_object",
    "broadcast_object_list",
)


@dataclass
class Call:
    name: str
    peer: int | None  # the other rank of a send/recv; the root of a broadcast/reduce
    sent: list[Any] = field(default_factory=list)  # tensors this rank contributes

    @property
    def sent_numel(self) -> int:
        return sum(int(t.numel()) for t in self.sent)


def _contributed(name: str, args: dict[str, Any], rank: int) -> tuple[int | None, list[Any]]:
    import torch

    def tensors(*keys: str) -> list[Any]:
        out = []
        for k in keys:
            v = args.get(k)
            vs = v if isinstance(v, (list, tuple)) else [v]
            out.extend(t.detach().clone() for t in vs if isinstance(t, torch.Tensor))
        return out

    if name in ("send", "isend"):
        return args.get("dst", args.get("group_dst")), tensors("tensor")
    if name in ("recv", "irecv"):
        return args.get("src", args.get("group_src")), []
    if name in ("broadcast", "scatter"):
        root = args.get("src", args.get("group_src"))
        key = "tensor" if name == "broadcast" else "scatter_list"
        return root, tensors(key) if root in (None, rank) else []
    if name in ("reduce", "gather"):
        return args.get("dst", args.get("group_dst")), tensors("tensor")
    keys = {
        "all_reduce": ("tensor",),
        "all_gather": ("tensor",),
        "all_gather_into_tensor": ("input_tensor",),
        "reduce_scatter": ("input_list",),
        "reduce_scatter_tensor": ("input",),
        "all_to_all": ("input_tensor_list",),
        "all_to_all_single": ("input",),
    }.get(name, ())
    return None, tensors(*keys)


class CommProbe:
    """Within the block, record the calls of this process to ``torch.distributed``."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._saved: list[tuple[Any, str, Any]] = []

    def _wrap(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        import torch.distributed as dist

        sig = inspect.signature(real)

        def recorded(*a: Any, **k: Any) -> Any:
            try:
                bound = sig.bind(*a, **k).arguments
            except TypeError:
                bound = {}
            peer, sent = _contributed(name, bound, dist.get_rank())
            self.calls.append(Call(name, peer, sent))
            return real(*a, **k)

        recorded.__name__ = name
        return recorded

    def __enter__(self) -> CommProbe:
        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d

        for name in POINT_TO_POINT + COLLECTIVES:
            real = getattr(c10d, name, None)
            if real is None:
                continue
            wrapped = self._wrap(name, real)
            # both namespaces: dist.P2POp validates its op against c10d's own isend/irecv
            for module in (dist, c10d):
                self._saved.append((module, name, getattr(module, name)))
                setattr(module, name, wrapped)
        return self

    def __exit__(self, *exc: Any) -> None:
        for module, name, real in reversed(self._saved):
            setattr(module, name, real)
        self._saved.clear()

    def collectives(self) -> list[str]:
        return sorted({c.name for c in self.calls if c.name in COLLECTIVES})

    def peers(self, *names: str) -> set[int]:
        return {c.peer for c in self.calls if c.name in names and c.peer is not None}

    def sent_numel(self) -> int:
        return sum(c.sent_numel for c in self.calls)
