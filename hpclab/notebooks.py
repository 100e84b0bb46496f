"""Notebook files in git: execute in quick mode and keep only what nbval compares (chapter 00).

Stored notebooks carry outputs only for cells that contain ``# NBVAL_CHECK_OUTPUT`` (nbval's
lax mode compares exactly those), plus one static image in each cell tagged ``key-figure``
(:mod:`hpclab.key_figures`); everything else is stripped, as is volatile metadata, so a diff
shows only real changes and no random or huge output (timings, widget state, plotly.js) lands
in git.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import nbformat

from hpclab import key_figures
from hpclab.environ import environ

CHECK_MARK = "# NBVAL_CHECK_OUTPUT"
_DROP_MIME = (
    "application/vnd.jupyter.widget-view+json",
    "application/vnd.jupyter.widget-state+json",
)
_KEEP_NB_META = ("kernelspec", "language_info")
# Cell metadata that means something: nbval/papermill tags, nbgrader's cell roles, and the
# read-only flags JupyterLab honours (exercises lock their check cells).
_KEEP_CELL_META = ("tags", "nbgrader", "editable", "deletable")


def _clean_output(out: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(out)
    data = out.get("data")
    if isinstance(data, dict):
        for mime in _DROP_MIME:
            data.pop(mime, None)
    if out.get("output_type") in ("display_data", "execute_result"):
        out["metadata"] = {}
    return out


def clean(nb: Any, keep_outputs: bool = True) -> Any:
    """A copy of ``nb`` without volatile metadata; outputs kept only on NBVAL_CHECK_OUTPUT cells."""
    nb = copy.deepcopy(nb)
    meta = nb.get("metadata", {})
    nb["metadata"] = {k: meta[k] for k in _KEEP_NB_META if k in meta}
    if "language_info" in nb["metadata"]:
        nb["metadata"]["language_info"] = {
            "name": nb["metadata"]["language_info"].get("name", "python")
        }
    nb["metadata"].setdefault(
        "kernelspec", {"display_name": "Python 3", "language": "python", "name": "python3"}
    )
    for cell in nb.cells:
        meta = cell.get("metadata", {})
        cell["metadata"] = {k: meta[k] for k in _KEEP_CELL_META if meta.get(k) not in (None, [])}
        if cell.cell_type != "code":
            continue
        if keep_outputs and CHECK_MARK in cell.source:
            # nbval refuses stored outputs without an execution count; a fresh top-to-bottom
            # run numbers cells deterministically, so the count is stable.
            cell["outputs"] = [
                _clean_output(o) for o in cell.get("outputs", []) if o.get("output_type") != "error"
            ]
            cell["outputs"] = [o for o in cell["outputs"] if o.get("data") != {}]
        elif keep_outputs and key_figures.is_key_figure(cell):
            # nbval (lax) runs the cell without comparing it, but refuses stored outputs with
            # no execution count: the fresh run's count stays, as on checked cells.
            cell["outputs"] = key_figures.static_outputs(cell.get("outputs", []))
            if not cell["outputs"]:
                cell["execution_count"] = None
        else:
            cell["execution_count"] = None
            cell["outputs"] = []
    return nb


def write(nb: Any, path: str | os.PathLike) -> None:
    Path(path).write_text(dumps(nb))


def dumps(nb: Any) -> str:
    return nbformat.writes(nb, version=4) + "\n"


def clean_file(path: str | os.PathLike) -> None:
    write(clean(nbformat.read(str(path), as_version=4)), path)


def execute(path: str | os.PathLike, timeout: int = 600, quick: bool = True) -> Any:
    """Run a notebook top to bottom in a fresh kernel (quick mode by default); returns it."""
    from nbclient import NotebookClient

    path = Path(path)
    nb = nbformat.read(str(path), as_version=4)
    env_patch = {"PLOTLY_RENDERER": "plotly_mimetype"}
    if quick:
        env_patch.update({"HPCLAB_QUICK": "1", "CI": "true"})
    with environ(env_patch):
        client = NotebookClient(
            nb,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(path.parent.resolve())}},
            store_widget_state=False,
        )
        client.execute()
    return nb


def refresh(path: str | os.PathLike) -> list[str]:
    """Execute in quick mode, then store cleaned (outputs only where nbval compares them, and
    each key figure's image); returns a line per key figure that got no new image."""
    before = nbformat.read(str(path), as_version=4)
    nb = execute(path)
    notes = key_figures.keep_images(nb, before)
    write(clean(nb), path)
    return notes
