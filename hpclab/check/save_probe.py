"""What a student's checkpoint writer does, step by step (chapter 07's atomic-save check).

While a :class:`Protocol` is active, ``torch.save`` and the file-system calls of a durable write
(``os.fsync``, ``os.replace``, ``os.rename``, ``os.remove``, ``os.unlink``) are recorded with
what they touched: the inode and size an fsync made durable, the file a rename moved. With
``kill_at=k`` the process kills itself (SIGKILL, like ``kill -9`` or an out-of-memory kill) at
the k-th step boundary, before or after one of these calls, so a check can interrupt the writer
in every window of its protocol, not only while the bytes are being written.
"""

from __future__ import annotations

import os
import signal
import stat
from dataclasses import dataclass
from typing import Any

WATCHED = ("fsync", "replace", "rename", "remove", "unlink")


@dataclass(frozen=True)
class Step:
    name: str  # "torch.save", "fsync", "replace", ...
    path: str = ""  # the file renamed or removed (the source of a rename)
    target: str = ""  # the destination of a rename
    inode: int = -1  # the file an fsync made durable, or the one a rename moved
    size: int = -1  # its size then
    is_dir: bool = False

    def label(self) -> str:
        if self.name == "torch.save":
            return "torch.save"
        if self.name in ("replace", "rename"):
            return f"os.{self.name}({os.path.basename(self.path)}, {os.path.basename(self.target)})"
        if self.name == "fsync":
            return "os.fsync(a directory)" if self.is_dir else "os.fsync"
        return f"os.{self.name}({os.path.basename(self.path)})"


def _stat(path: Any) -> tuple[int, int, bool]:
    try:
        st = os.stat(path)
    except (OSError, TypeError, ValueError):
        return -1, -1, False
    return st.st_ino, st.st_size, stat.S_ISDIR(st.st_mode)


class Protocol:
    """Within the block, record each step of a checkpoint write (and die at ``kill_at``)."""

    def __init__(self, kill_at: int | None = None) -> None:
        self.kill_at, self.points = kill_at, 0
        self.steps: list[Step] = []
        self._saved: list[tuple[Any, str, Any]] = []

    def _boundary(self) -> None:
        if self.points == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        self.points += 1

    def _step(self, name: str, args: tuple) -> Step:
        if name == "fsync":
            fd = args[0] if args else -1
            fd = fd if isinstance(fd, int) else getattr(fd, "fileno", lambda: -1)()
            try:
                st = os.fstat(fd)
                return Step("fsync", "", "", st.st_ino, st.st_size, stat.S_ISDIR(st.st_mode))
            except (OSError, TypeError, ValueError):
                return Step("fsync")
        if name in ("replace", "rename") and len(args) >= 2:
            inode, size, _ = _stat(args[0])
            return Step(name, os.fspath(args[0]), os.fspath(args[1]), inode, size)
        if name in ("remove", "unlink") and args:
            return Step(name, os.fspath(args[0]))
        return Step(name)

    def _wrap(self, name: str, real: Any) -> Any:
        def traced(*args: Any, **kwargs: Any) -> Any:
            self._boundary()
            self.steps.append(self._step(name, args))
            out = real(*args, **kwargs)
            self._boundary()
            return out

        return traced

    def __enter__(self) -> Protocol:
        import torch

        for name in WATCHED:
            self._saved.append((os, name, getattr(os, name)))
            setattr(os, name, self._wrap(name, getattr(os, name)))
        self._saved.append((torch, "save", torch.save))
        torch.save = self._wrap("torch.save", torch.save)
        return self

    def __exit__(self, *exc: Any) -> None:
        for module, name, real in reversed(self._saved):
            setattr(module, name, real)
        self._saved.clear()

    def window(self, point: int) -> str:
        """Words for step boundary ``point`` ("before os.fsync", "after torch.save")."""
        step, after = divmod(point, 2)
        if step >= len(self.steps):
            return "at the end"
        return ("after " if after else "before ") + self.steps[step].label()
