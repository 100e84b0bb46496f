"""The outputs a chapter stores for checking, compared on the copy the browser test ran and saved.

A chapter marks the cells whose output must not change with ``# NBVAL_CHECK_OUTPUT`` (nbval's
marker; every other output may differ from run to run). The browser test runs each chapter under
``notebooks/`` once, with Run All in JupyterLab, and checks these outputs on the notebook it saved,
the way ``pytest --nbval-lax --nbval-sanitize-with tests/sanitize.cfg`` compares them: streams
and the text/plain and text/html of results, after the same replacements (durations, addresses,
temporary paths...). ``make test`` then leaves ``notebooks/`` out of nbval when Chromium is there:
each chapter runs once in CI, not twice (the solutions stay under nbval).
"""

from __future__ import annotations

import configparser
import json
import re
import time
from pathlib import Path

SANITIZE = Path(__file__).resolve().parents[1] / "sanitize.cfg"
MARKER = "NBVAL_CHECK_OUTPUT"
MIMES = ("text/plain", "text/html")


def _sanitizers() -> list[tuple[re.Pattern, str]]:
    cfg = configparser.ConfigParser()
    cfg.read(SANITIZE)
    return [(re.compile(cfg[s]["regex"]), cfg[s]["replace"]) for s in cfg.sections()]


def _text(value: str | list[str]) -> str:
    return value if isinstance(value, str) else "".join(value)


def comparable(outputs: list[dict], subs: list[tuple[re.Pattern, str]]) -> list[tuple[str, str]]:
    """(kind, sanitised text) of each output: consecutive stream chunks of one name joined (a
    frontend and a kernel client split a stream differently), images and widget views left out."""
    out: list[tuple[str, str]] = []
    for o in outputs:
        kind = o["output_type"]
        if kind == "stream":
            text = _text(o.get("text", ""))
            if out and out[-1][0] == f"stream:{o['name']}":
                out[-1] = (out[-1][0], out[-1][1] + text)
            else:
                out.append((f"stream:{o['name']}", text))
        elif kind in ("execute_result", "display_data"):
            out += [(m, _text(o["data"][m])) for m in MIMES if m in o.get("data", {})]
        elif kind == "error":
            out.append(("error", f"{o.get('ename')}: {o.get('evalue')}"))
    for i, (k, text) in enumerate(out):
        for pattern, replace in subs:
            text = pattern.sub(replace, text)
        out[i] = (k, text)
    return out


def mismatches(reference: Path, ran: Path) -> list[str]:
    """One line per checked cell whose outputs differ between ``reference`` (the repository's
    chapter) and ``ran`` (the copy that was run and saved)."""
    ref_cells = json.loads(reference.read_text())["cells"]
    ran_cells = json.loads(ran.read_text())["cells"]
    if len(ref_cells) != len(ran_cells):
        return [f"{ran.name}: {len(ran_cells)} cells saved, {len(ref_cells)} in the chapter"]
    subs, found = _sanitizers(), []
    for i, (ref, got) in enumerate(zip(ref_cells, ran_cells, strict=True)):
        if ref["cell_type"] != "code" or MARKER not in _text(ref["source"]):
            continue
        want, have = comparable(ref["outputs"], subs), comparable(got["outputs"], subs)
        if want != have:
            first = next(
                (f"{w!r} != {h!r}" for w, h in zip(want, have, strict=False) if w != h), ""
            )
            found.append(
                f"cell {i} ({_text(ref['source']).splitlines()[0][:60]!r}): {len(have)} outputs, "
                f"{len(want)} stored; first difference: {first[:400] or 'count'}"
            )
    return found


def wait_saved(path: Path, timeout_s: float = 60.0) -> None:
    """Until the saved copy has every code cell executed (the save is asynchronous)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            cells = json.loads(path.read_text())["cells"]
            if all(c.get("execution_count") for c in cells if c["cell_type"] == "code"):
                return
        except (OSError, ValueError, KeyError):
            pass
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{path.name} was not saved with every cell run within {timeout_s} s"
            )
        time.sleep(0.5)
