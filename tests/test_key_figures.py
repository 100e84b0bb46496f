"""Each section's key figure is stored as one small PNG (hpclab.key_figures): rendered from the
plotly JSON the cell drew, kept by clean(), the old image kept when rendering is impossible.
That nbval runs such a cell without comparing its image is proven by nbval over notebooks/,
whose key-figure cells store one."""

from __future__ import annotations

import base64
import contextlib

import nbformat
import plotly.graph_objects as go
import pytest

from hpclab import key_figures, notebooks


def _executed(tagged: bool = True):
    fig = go.Figure(go.Scatter(x=[1, 2, 3], y=[3, 1, 2], name="live"))
    fig.update_layout(title="A lesson<br>a note")
    cell = nbformat.v4.new_code_cell("plot(result)")
    cell.metadata["tags"] = [key_figures.TAG] if tagged else []
    cell.outputs = [
        nbformat.v4.new_output(
            "display_data", data={key_figures.PLOTLY: fig.to_plotly_json(), "text/plain": "Fig"}
        )
    ]
    cell.execution_count = 3
    nb = nbformat.v4.new_notebook()
    nb.cells = [cell]
    return nb


def test_clean_keeps_only_the_png_of_a_key_figure():
    nb = _executed()
    nb.cells[0].outputs.append(key_figures.image_output(b"\x89PNG fake", "A lesson"))
    cleaned = notebooks.clean(nb)
    (out,) = cleaned.cells[0].outputs
    assert set(out["data"]) == {key_figures.PNG, "text/plain"} and out["metadata"] == {}
    assert cleaned.cells[0].execution_count == 3  # nbval refuses outputs of an unrun cell
    assert notebooks.clean(_executed(tagged=False)).cells[0].outputs == []  # untagged: nothing


def test_a_failed_render_keeps_the_image_stored_before(monkeypatch):
    before = _executed()
    before.cells[0].outputs = [key_figures.image_output(b"\x89PNG old", "A lesson")]

    def no_chromium(spec):
        raise RuntimeError("no browser found")

    monkeypatch.setattr(key_figures, "render_png", no_chromium)
    monkeypatch.setattr(key_figures, "_one_browser", contextlib.nullcontext)
    nb = _executed()
    notes = key_figures.keep_images(nb, before)
    assert nb.cells[0].outputs == before.cells[0].outputs
    assert notes == ["cell 0: kept the image stored before (RuntimeError: no browser found)"]
    fresh = _executed()
    assert "has no image" in key_figures.keep_images(fresh, None)[0] and not fresh.cells[0].outputs


def test_the_image_is_rendered_small_and_the_same_twice():
    pytest.importorskip("kaleido")
    nb = _executed()
    nb.cells.append(_executed().cells[0])  # the same figure twice, in one browser session
    assert key_figures.keep_images(nb) == []
    (out,) = nb.cells[0].outputs
    png = base64.b64decode(out["data"][key_figures.PNG])
    assert png.startswith(b"\x89PNG") and len(out["data"][key_figures.PNG]) < 20_000
    assert int.from_bytes(png[16:20], "big") == key_figures.WIDTH  # IHDR width
    assert "A lesson" in out["data"]["text/plain"] and "a note" not in out["data"]["text/plain"]
    note_only = {"layout": {"title": {"text": '<span style="color:#b42318">you got 0.1</span>'}}}
    assert key_figures._title(note_only) == "figure"  # the load note is no title
    assert nb.cells[1].outputs == nb.cells[0].outputs  # same figure, same bytes
