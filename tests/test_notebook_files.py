"""Notebook files in git stay small, clean and checked (DESIGN.md: no random or huge outputs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpclab import key_figures
from hpclab.notebooks import CHECK_MARK

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted(
    p
    for d in ("notebooks", "solutions", "exercises")
    for p in (ROOT / d).glob("[0-9][0-9]_*.ipynb")
)


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_small_and_free_of_volatile_state(path):
    assert path.stat().st_size < 1_000_000, f"{path.name} is over 1 MB"
    nb = json.loads(path.read_text())
    assert "widgets" not in nb["metadata"], "widget state saved in the notebook"
    text = path.read_text()
    assert "application/vnd.jupyter.widget-view+json" not in text
    assert "cdn.plot.ly" not in text and "window.PlotlyConfig" not in text, "embedded plotly.js"
    for cell in nb["cells"]:
        if cell["cell_type"] != "code" or CHECK_MARK in "".join(cell["source"]):
            continue
        if key_figures.is_key_figure(cell):  # one small image, nothing else
            assert key_figures.static_outputs(cell["outputs"]) == cell["outputs"], path.name
            assert len(cell["outputs"]) <= 1
            assert all(
                len(o["data"][key_figures.PNG]) <= key_figures.MAX_CHARS for o in cell["outputs"]
            )
        else:
            assert not cell.get("outputs"), f"unchecked outputs stored in {path.name}"


@pytest.mark.parametrize(
    "path", [p for p in FILES if p.parent.name != "exercises"], ids=lambda p: p.name
)
def test_every_notebook_compares_a_meaningful_output(path):
    nb = json.loads(path.read_text())
    checked = [
        c
        for c in nb["cells"]
        if c["cell_type"] == "code" and CHECK_MARK in "".join(c["source"]) and c.get("outputs")
    ]
    assert checked, f"{path.name}: no cell with {CHECK_MARK} and a stored output for nbval"


def test_every_solution_has_a_chapter_notebook_and_exercise():
    for sol in (ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"):
        assert (ROOT / "exercises" / sol.name).exists()
        chapter = sol.name[:2]
        assert list((ROOT / "notebooks").glob(f"{chapter}_*.ipynb")), sol.name
