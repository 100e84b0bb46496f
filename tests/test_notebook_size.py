"""A notebook run headless (nbclient, widget state stored, as papermill and nbconvert do) stays
small: live figures are plotly JSON, not a FigureWidget dragging 5 MB of JavaScript along."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

REPO = Path(__file__).resolve().parents[1]
LIMIT_BYTES = 300_000  # a FigureWidget alone stored ~5 MB per notebook


def test_headless_run_with_live_panels_stays_small(tmp_path, monkeypatch):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "from hpclab.widgets import panel\n\n"
            'panel("hardware", fields=("cores",), fixed={"probe_size": 0}, accumulate=True)'
        ),
        nbformat.v4.new_code_cell(
            "from hpclab.widgets.wait_monitor import wait_monitor\n\n"
            'm = wait_monitor(format=("memmap",), samples=64, shape=(1, 8, 8), steps=3)\n'
            "m.start(wait=True)\nm"
        ),
    ]
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", path)  # the kernel imports this checkout's hpclab
    nbclient.NotebookClient(
        nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    out = tmp_path / "run.ipynb"
    nbformat.write(nb, out)
    text = out.read_text()
    assert "application/vnd.jupyter.widget-state+json" in text  # widget state was stored ...
    assert "application/vnd.plotly.v1+json" in text  # ... with the figures as plotly JSON
    assert "anywidget" not in text and "_esm" not in text
    assert out.stat().st_size < LIMIT_BYTES, f"{out.stat().st_size} bytes"
