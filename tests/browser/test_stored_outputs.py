"""The browser test's stand-in for nbval on the chapters: what it lets pass and what it catches."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from stored_outputs import MARKER, mismatches

CHAPTER = Path(__file__).resolve().parents[2] / "notebooks" / "04_storage.ipynb"


def _checked(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code" and MARKER in "".join(c["source"])]


def _write(tmp_path: Path, nb: dict) -> Path:
    path = tmp_path / CHAPTER.name
    path.write_text(json.dumps(nb))
    return path


def test_same_outputs_pass_and_a_changed_one_is_named(tmp_path):
    nb = json.loads(CHAPTER.read_text())
    assert _checked(nb) and all(c["outputs"] for c in _checked(nb))
    assert mismatches(CHAPTER, _write(tmp_path, nb)) == []
    ran = copy.deepcopy(nb)
    cell = _checked(ran)[0]
    out = cell["outputs"][0]
    key = "text" if out["output_type"] == "stream" else "data"
    if key == "text":
        out["text"] = "".join(out["text"]) + "one more line\n"
    else:
        out["data"]["text/plain"] = "something else"
    bad = mismatches(CHAPTER, _write(tmp_path, ran))
    assert len(bad) == 1 and bad[0].startswith(f"cell {nb['cells'].index(_checked(nb)[0])} (")


def test_what_differs_run_to_run_is_sanitised_as_nbval_does(tmp_path):
    """A duration, an address and a stream split in two chunks are not differences; an error
    output and a missing output are."""
    nb = json.loads(CHAPTER.read_text())
    cell = next(c for c in _checked(nb) if c["outputs"][0]["output_type"] == "stream")
    cell["outputs"] = [
        {"output_type": "stream", "name": "stdout", "text": "took 1.5 s at 0x7f00aa11\nok\n"}
    ]
    ref = _write(tmp_path, nb)
    ran = copy.deepcopy(nb)
    c = next(c for c in _checked(ran) if c["outputs"][0]["output_type"] == "stream")
    c["outputs"] = [
        {"output_type": "stream", "name": "stdout", "text": "took 23 ms at 0x7f1234abcd\n"},
        {"output_type": "stream", "name": "stdout", "text": "ok\n"},
    ]
    (tmp_path / "ran").mkdir()
    ran_path = tmp_path / "ran" / CHAPTER.name
    ran_path.write_text(json.dumps(ran))
    assert mismatches(ref, ran_path) == []
    c["outputs"].append(
        {"output_type": "error", "ename": "ValueError", "evalue": "x", "traceback": []}
    )
    ran_path.write_text(json.dumps(ran))
    assert len(mismatches(ref, ran_path)) == 1
    c["outputs"] = []
    ran_path.write_text(json.dumps(ran))
    assert "0 outputs, 1 stored" in mismatches(ref, ran_path)[0]
