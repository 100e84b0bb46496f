"""A static image of each section's key figure, stored in the notebook file (chapter 00).

Notebooks in git keep no live output (:mod:`hpclab.notebooks`), so a chapter read on a web page,
or opened before running, would show no figure at all. A code cell tagged ``key-figure`` keeps
one PNG of the figure it drew when ``hpclab notebooks refresh`` ran it: plotly's JSON rendered
by kaleido with the Chromium the browser test uses, at a fixed size (same figure, same bytes).
Running the cell replaces the image with the live figure. nbval does not compare it (lax mode
compares only ``# NBVAL_CHECK_OUTPUT`` cells).

Where kaleido or Chromium is missing, refresh keeps the image stored before and says so.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import re
import warnings
from collections.abc import Iterator
from typing import Any

import nbformat

TAG = "key-figure"
PNG = "image/png"
PLOTLY = "application/vnd.plotly.v1+json"
WIDTH, MAX_HEIGHT = 760, 760
# One stored image (base64 characters): a few tens of KB, so ten chapters stay small.
MAX_CHARS = 60_000


def is_key_figure(cell: Any) -> bool:
    return cell.get("cell_type") == "code" and TAG in cell.get("metadata", {}).get("tags", [])


def static_outputs(outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stored image among ``outputs`` (PNG and its text alternative only), or nothing."""
    for out in outputs:
        data = out.get("data") or {}
        if PNG in data:
            kept = {k: data[k] for k in (PNG, "text/plain") if k in data}
            return [nbformat.v4.new_output("display_data", data=kept)]
    return []


def render_png(spec: dict[str, Any]) -> bytes:
    """The plotly figure ``spec`` (its JSON) as a PNG of :data:`WIDTH` pixels."""
    import plotly.io as pio

    fig = pio.from_json(json.dumps(spec))
    height = min(int(fig.layout.height or 440), MAX_HEIGHT)  # the plot's own layout
    with warnings.catch_warnings():  # plotly says its options go unused with one browser
        warnings.filterwarnings("ignore", message="The kopts argument is ignored")
        png = fig.to_image(format="png", width=WIDTH, height=height, scale=1)
    return _palette(png)


def _palette(png: bytes, colors: int = 128) -> bytes:
    """``png`` with at most ``colors`` colours (no dithering): a plot has few colours plus
    anti-aliasing, and the file shrinks 4-5x with no visible change."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    small = image.quantize(colors, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    out = io.BytesIO()
    small.save(out, format="PNG", optimize=True)
    return out.getvalue()


@contextlib.contextmanager
def _one_browser() -> Iterator[None]:
    """One Chromium for every render of a notebook (kaleido starts one per figure otherwise)."""
    try:
        import kaleido

        kaleido.start_sync_server(silence_warnings=True)
    except Exception:  # noqa: BLE001 - no kaleido or no browser: render_png says why
        yield
        return
    try:
        yield
    finally:
        kaleido.stop_sync_server(silence_warnings=True)


def image_output(png: bytes, title: str) -> dict[str, Any]:
    name = "[figure]" if title == "figure" else f"[figure: {title}]"
    alt = f"{name} (a stored image: run the cell for the live figure)"
    data = {PNG: base64.b64encode(png).decode("ascii"), "text/plain": alt}
    return nbformat.v4.new_output("display_data", data=data)


def _title(spec: dict[str, Any]) -> str:
    """The title's first line as plain text (not the red load note under it)."""
    title = (spec.get("layout") or {}).get("title") or {}
    text = title.get("text", "") if isinstance(title, dict) else str(title)
    lines = [re.sub(r"<[^>]+>", "", t) for t in text.split("<br>") if "#b42318" not in t]
    return next((t.strip() for t in lines if t.strip()), "figure")


def keep_images(nb: Any, before: Any | None = None) -> list[str]:
    """Give each key-figure cell of the executed ``nb`` its image (in place); returns one line
    per cell that kept the image of ``before`` (the notebook as it was) or got none."""
    old_cells = [c for c in (before.cells if before is not None else []) if is_key_figure(c)]
    old = {c.get("id"): c for c in old_cells} | {c.get("source"): c for c in old_cells}
    notes: list[str] = []
    cells = [(i, c) for i, c in enumerate(nb.cells) if is_key_figure(c)]
    if cells:
        with _one_browser():
            for i, cell in cells:
                _keep_image(i, cell, old, notes)
    return notes


def _keep_image(i: int, cell: Any, old: dict[str, Any], notes: list[str]) -> None:
    specs = [o["data"][PLOTLY] for o in cell.get("outputs", []) if PLOTLY in o.get("data", {})]
    outputs: list[dict[str, Any]] = []
    why = "it drew no plotly figure"
    if specs:
        try:
            outputs = [image_output(render_png(specs[-1]), _title(specs[-1]))]
        except Exception as exc:  # noqa: BLE001 - no kaleido/Chromium: keep the old image
            why = f"{type(exc).__name__}: {exc}".splitlines()[0]
    if outputs and len(outputs[0]["data"][PNG]) > MAX_CHARS:
        size = len(outputs[0]["data"][PNG])
        why, outputs = f"its image is {size} characters (limit {MAX_CHARS})", []
    if not outputs:
        prev = old.get(cell.get("id")) or old.get(cell.get("source"))
        outputs = static_outputs(prev.get("outputs", [])) if prev is not None else []
        kept = "kept the image stored before" if outputs else "has no image"
        notes.append(f"cell {i}: {kept} ({why})")
    cell["outputs"] = outputs
