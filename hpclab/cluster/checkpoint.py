"""Checkpoints that survive being killed while they are written (chapter 07, section 3).

A job on a cluster ends when its time is up (Mao 2017: "do checkpointing!"; jobs without an
allocation had 4-hour limits) or when a node fails, so a long training saves its state and a
new job resumes from it. Two rules make that safe:

- **Atomic**: write to a temporary file in the same directory, flush, ``fsync``, then
  ``os.replace`` it onto its final name (and ``fsync`` the directory so the rename is durable).
  A reader sees the old file or the new one, never half of one: a ``kill -9`` during the write
  leaves only a ``.tmp`` behind.
- **Keep the previous one**: each checkpoint has its own name (``ckpt-<step>.pt``), the last
  ``keep`` stay. If the newest cannot be read (a disk that lied, a truncated copy), it is refused
  with its name and the one before it is used.

Alternatives, and when to use them: ``torch.distributed.checkpoint`` saves sharded state (each
rank its shard, FSDP/tensor parallel) in parallel and reshards on load; submitit's
``checkpoint()`` method resubmits a pickled callable for you. A single-file ``torch.save`` as
here is right for data parallel training, where every rank holds the whole model and rank 0 saves.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import torch

from hpclab.private import private_dir

_NAME = re.compile(r"^ckpt-(\d+)\.pt$")


def save_atomic(obj: Any, path: str | Path) -> float:
    """``torch.save`` ``obj`` to ``path`` atomically; returns the seconds it took."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    t0 = time.perf_counter()
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself reaches the disk
    finally:
        os.close(fd)
    return time.perf_counter() - t0


def save_checkpoint(directory: str | Path, step: int, state: dict, keep: int = 2) -> dict:
    """Write ``ckpt-<step>.pt``, delete all but the newest ``keep``; size and speed of the write."""
    d = private_dir(directory)
    path = d / f"ckpt-{step:08d}.pt"
    seconds = save_atomic(state, path)
    for old in checkpoints(d)[keep:]:
        old.unlink(missing_ok=True)
    mb = path.stat().st_size / 1e6
    return {"path": str(path), "mb": mb, "seconds": seconds, "mb_per_s": mb / max(seconds, 1e-9)}


def checkpoints(directory: str | Path) -> list[Path]:
    """Complete checkpoints in ``directory``, newest first (``.tmp`` files are never one)."""
    d = Path(directory)
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in d.iterdir() if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found, reverse=True)]


def load_latest(directory: str | Path) -> tuple[dict | None, Path | None, list[str]]:
    """The newest checkpoint that loads: (state, its path, refusals "NAME: why" for newer ones)."""
    refused: list[str] = []
    for path in checkpoints(directory):
        try:
            state = torch.load(path, weights_only=False)
        except Exception as exc:  # truncated zip, bad pickle: refuse this one, try the previous
            refused.append(
                f"{path.name}: unreadable ({type(exc).__name__}), using the previous one"
            )
            continue
        if not isinstance(state, dict) or "step" not in state:
            refused.append(f"{path.name}: not a training checkpoint, using the previous one")
            continue
        return state, path, refused
    return None, None, refused
