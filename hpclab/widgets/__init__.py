"""Notebook views: widget panels for experiments (chapter 00)."""

from hpclab.widgets.panel import CONTROL_CLASS, ExperimentPanel, panel, update_figure

__all__ = ["CONTROL_CLASS", "ExperimentPanel", "panel", "update_figure"]
