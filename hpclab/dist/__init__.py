"""Process launch and placement for multi-rank experiments (chapter 00; used in chapters 04-06)."""

from hpclab.dist.context import RankContext
from hpclab.dist.failures import LaunchTimeout, RankError
from hpclab.dist.launcher import launch
from hpclab.dist.reap import left_behind
from hpclab.dist.start import start_method
from hpclab.dist.placement import LaunchError, Placement, gpu_count, place, torch_threads

__all__ = [
    "LaunchError",
    "LaunchTimeout",
    "Placement",
    "RankContext",
    "RankError",
    "gpu_count",
    "launch",
    "left_behind",
    "place",
    "start_method",
    "torch_threads",
]
