"""Notebook views: widget panels for experiments, and the live views built on them (chapter 00).

Topic packages never import this package: they expose data and hooks; the views live here.
"""

from hpclab.widgets.controls import CONTROL_CLASS
from hpclab.widgets.figure_view import FIGURE_CLASS, FigureView
from hpclab.widgets.panel import ExperimentPanel, panel

__all__ = ["CONTROL_CLASS", "FIGURE_CLASS", "ExperimentPanel", "FigureView", "panel"]
