"""Process launch for multi-rank experiments (chapter 00; used in chapters 05 and 06)."""

from hpclab.dist.context import RankContext
from hpclab.dist.launcher import LaunchError, LaunchTimeout, RankError, choose_backend, launch

__all__ = ["LaunchError", "LaunchTimeout", "RankContext", "RankError", "choose_backend", "launch"]
