"""Exercises are generated from solutions (chapter 00).

``solutions/NN_*.ipynb`` is the source. Code between ``### BEGIN SOLUTION`` and
``### END SOLUTION`` (nbgrader's markers) is replaced by a stub that raises
``NotImplementedError`` with the hint given on a ``### HINT:`` line inside the block; a markdown
answer block becomes "YOUR ANSWER HERE". ``hpclab exercises check`` fails when ``exercises/``
differs from what ``build`` would write, naming the stale file.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import nbformat

from hpclab.notebooks import clean, dumps

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
HINT = "### HINT:"
_BANNER = (
    "*Exercise notebook generated from `solutions/{name}` by `hpclab exercises build`; "
    "edit the solution, not this file.* Replace each `raise NotImplementedError(...)` with your "
    "code, then run the check cell below it."
)
_NAME = re.compile(r"^\d\d_.*\.ipynb$")


class MarkerError(ValueError):
    """Unbalanced solution markers: names the file and cell."""


def strip_solutions(source: str, where: str = "", markdown: bool = False) -> str:
    """Replace every solution block in one cell's source by a stub."""
    lines = source.splitlines()
    out: list[str] = []
    inside = False
    indent = ""
    hints: list[str] = []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith(BEGIN):
            if inside:
                raise MarkerError(f"{where}: nested {BEGIN}")
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            hints = []
            continue
        if stripped.startswith(END):
            if not inside:
                raise MarkerError(f"{where}: {END} without {BEGIN}")
            inside = False
            if markdown:
                out.append("YOUR ANSWER HERE")
            else:
                hint = " ".join(hints) or "write your code here"
                out.extend(f"{indent}# HINT: {h}" for h in hints)
                out.append(f"{indent}# YOUR CODE HERE")
                out.append(f"{indent}raise NotImplementedError({hint!r})")
            continue
        if inside:
            if stripped.startswith(HINT):
                hints.append(stripped[len(HINT) :].strip())
            continue
        out.append(line)
    if inside:
        raise MarkerError(f"{where}: {BEGIN} without {END}")
    return "\n".join(out)


def render(solution: Path) -> str:
    """The exact text of the exercise notebook generated from ``solution``."""
    nb = nbformat.read(str(solution), as_version=4)
    ex = clean(copy.deepcopy(nb), keep_outputs=False)
    for i, cell in enumerate(ex.cells):
        if BEGIN in cell.source:
            cell.source = strip_solutions(
                cell.source, f"{solution.name} cell {i}", markdown=cell.cell_type == "markdown"
            )
    banner = nbformat.v4.new_markdown_cell(_BANNER.format(name=solution.name))
    banner["id"] = "exercise-banner"
    ex.cells.insert(0, banner)
    return dumps(ex)


def _solutions(solutions_dir: str | Path) -> list[Path]:
    folder = Path(solutions_dir)
    if not folder.is_dir():
        raise FileNotFoundError(
            f"solutions folder {str(folder)!r} not found (run from the repo root)"
        )
    return sorted(p for p in folder.iterdir() if _NAME.match(p.name))


def build(
    solutions_dir: str | Path = "solutions", exercises_dir: str | Path = "exercises"
) -> list[Path]:
    """Write ``exercises/`` from ``solutions/``; remove exercises whose solution is gone."""
    out_dir = Path(exercises_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sources = _solutions(solutions_dir)
    written = []
    for sol in sources:
        target = out_dir / sol.name
        text = render(sol)
        if not target.exists() or target.read_text() != text:
            target.write_text(text)
            written.append(target)
    names = {s.name for s in sources}
    for orphan in out_dir.iterdir():
        if _NAME.match(orphan.name) and orphan.name not in names:
            orphan.unlink()
    return written


def stale(
    solutions_dir: str | Path = "solutions", exercises_dir: str | Path = "exercises"
) -> list[str]:
    """What differs between ``exercises/`` and a fresh build; empty when up to date."""
    out_dir = Path(exercises_dir)
    problems = []
    sources = _solutions(solutions_dir)
    for sol in sources:
        target = out_dir / sol.name
        if not target.exists():
            problems.append(f"{target} is missing")
        elif target.read_text() != render(sol):
            problems.append(f"{target} differs from what solutions/{sol.name} generates")
    names = {s.name for s in sources}
    if out_dir.is_dir():
        for extra in sorted(out_dir.iterdir()):
            if _NAME.match(extra.name) and extra.name not in names:
                problems.append(f"{extra} has no solution source")
    return problems
