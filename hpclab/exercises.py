"""Exercises are generated from solutions (chapter 00).

``solutions/NN_*.ipynb`` is the source. Code between ``### BEGIN SOLUTION`` and
``### END SOLUTION`` (nbgrader's markers) is replaced by a stub: the ``### HINT:`` lines of the
block become ``# HINT:`` comments (a nudge, not the answer), then

- inside a function: ``raise NotImplementedError(...)`` (the check says "not yet");
- at the top level of a cell: ``name = ...`` for every name the block defines that later code
  uses, so "Run All" never stops there and the check below says "not yet";

a markdown answer block becomes "YOUR ANSWER HERE". ``hpclab exercises check`` fails when
``exercises/`` differs from what ``build`` would write, naming the stale file.

``build`` also gives every solutions notebook the cell metadata nbgrader 0.9 expects, derived
from the markers and the check cells (a code cell whose last line calls a function imported from
``hpclab.check``): solution cells, check cells as autograded tests worth one point each,
discussion answers as manually graded cells worth no points, instructions read-only. An
instructor can copy ``solutions/`` into an nbgrader course as its source; the exercises carry
the same metadata, so a student's exercise notebook can be collected and autograded too.
"""

from __future__ import annotations

import ast
import copy
import re
from pathlib import Path
from typing import Any

import nbformat

from hpclab.notebooks import clean, dumps

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
HINT = "### HINT:"
_BANNER = (
    "*Exercise notebook generated from `solutions/{name}` by `hpclab exercises build`; "
    "edit the solution, not this file.* Replace each `...` and each "
    "`raise NotImplementedError(...)` with your code, then run the check cell below it. An "
    "exercise you have not done yet only makes its own check say NOT YET: Run All reaches the end. "
    "Stuck? The NOT YET message names a `hint(...)` that shows up to three hints, one at a time."
)
_NAME = re.compile(r"^\d\d_.*\.ipynb$")


class MarkerError(ValueError):
    """Unbalanced solution markers: names the file and cell."""


_STUB_MESSAGE = "exercise not done yet: replace this line with your code"


def _stored_names(block: list[str]) -> list[str]:
    """Names a top-level solution block binds, in order (empty if it does not parse)."""
    try:
        tree = ast.parse("\n".join(block))
    except SyntaxError:
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            name = node.id
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            name = node.name
        else:
            continue
        if name not in names:
            names.append(name)
    return names


def _loaded_names(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:  # IPython magics: fall back to every identifier
        return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", source))
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def strip_solutions(
    source: str, where: str = "", markdown: bool = False, used: set[str] | None = None
) -> str:
    """Replace every solution block in one cell's source by a stub.

    ``used``: names that code outside the solution blocks reads; a top-level block's stub binds
    those of them it defines to ``...``. Without it every top-level block gets a raising stub.
    """
    lines = source.splitlines()
    out: list[str] = []
    inside = False
    indent = ""
    hints: list[str] = []
    block: list[str] = []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith(BEGIN):
            if inside:
                raise MarkerError(f"{where}: nested {BEGIN}")
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            hints, block = [], []
            continue
        if stripped.startswith(END):
            if not inside:
                raise MarkerError(f"{where}: {END} without {BEGIN}")
            inside = False
            if markdown:
                out.append("YOUR ANSWER HERE")
            else:
                out.extend(f"{indent}# HINT: {h}" for h in hints)
                out.append(f"{indent}# YOUR CODE HERE")
                names = [] if indent or used is None else _stored_names(block)
                names = [n for n in names if n in (used or ())]
                if names:
                    out.extend(f"{n} = ..." for n in names)
                else:
                    out.append(f"{indent}raise NotImplementedError({_STUB_MESSAGE!r})")
            continue
        if inside:
            if stripped.startswith(HINT):
                hints.append(stripped[len(HINT) :].strip())
            else:
                block.append(line)
            continue
        out.append(line)
    if inside:
        raise MarkerError(f"{where}: {BEGIN} without {END}")
    return "\n".join(out)


def _used_names(cells: list[Any], where: str) -> set[str]:
    """Names read by code outside the solution blocks, anywhere in the notebook."""
    used: set[str] = set()
    for i, cell in enumerate(cells):
        if cell.cell_type == "code":
            used |= _loaded_names(strip_solutions(cell.source, f"{where} cell {i}"))
    return used


# --- nbgrader metadata ----------------------------------------------------------------------


def _check_names(cells: list[Any]) -> set[str]:
    """Names bound by ``from hpclab.check... import ...`` / ``import hpclab.check...``."""
    names: set[str] = set()
    for cell in cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hpclab.check"):
                names.update(a.asname or a.name for a in node.names)
            elif isinstance(node, ast.Import):
                names.update(
                    (a.asname or a.name).split(".")[0]
                    for a in node.names
                    if a.name.startswith("hpclab.check")
                )
    return names


def is_check_cell(cell: Any, check_names: set[str]) -> bool:
    """A code cell whose last statement calls something imported from ``hpclab.check``."""
    if cell.cell_type != "code" or BEGIN in cell.source:
        return False
    try:
        body = ast.parse(cell.source).body
    except SyntaxError:
        return False
    if not body or not isinstance(body[-1], ast.Expr) or not isinstance(body[-1].value, ast.Call):
        return False
    func = body[-1].value.func
    if isinstance(func, ast.Name) and func.id in ("hint", "solved"):  # helpers, not checks
        return False
    while isinstance(func, ast.Attribute):
        func = func.value
    return isinstance(func, ast.Name) and func.id in check_names


def annotate(nb: Any) -> Any:
    """A copy of ``nb`` with nbgrader 0.9 cell metadata derived from markers and check cells."""
    nb = copy.deepcopy(nb)
    checks = _check_names(nb.cells)
    counts: dict[str, int] = {}

    def meta(kind: str, **flags: Any) -> dict[str, Any]:
        counts[kind] = counts.get(kind, 0) + 1
        m = {"grade": False, "grade_id": f"{kind}-{counts[kind]}", "locked": False}
        m.update(flags)
        m.setdefault("solution", False)
        m["schema_version"] = 3
        return dict(sorted(m.items()))

    for cell in nb.cells:
        cell.metadata.pop("nbgrader", None)
        if BEGIN in cell.source and cell.cell_type == "markdown":
            # nbgrader: a markdown answer must be a graded cell; 0 points keeps autograded
            # scores whole (the instructor reads the answers; change the points to grade them).
            cell.metadata["nbgrader"] = meta("discussion", solution=True, grade=True, points=0)
        elif BEGIN in cell.source:
            cell.metadata["nbgrader"] = meta("answer", solution=True)
        elif is_check_cell(cell, checks):
            cell.metadata["nbgrader"] = meta("check", grade=True, locked=True, points=1)
        elif cell.cell_type == "markdown":
            cell.metadata["nbgrader"] = meta("instructions", locked=True)
    return nb


def _lock_for_students(cell: Any) -> None:
    """What nbgrader's release does to locked cells: JupyterLab will not edit or delete them."""
    m = cell.metadata.get("nbgrader", {})
    if m.get("locked"):
        cell.metadata["editable"] = False
    if m.get("locked") or m.get("solution") or m.get("grade"):
        cell.metadata["deletable"] = False


def render(solution: Path) -> str:
    """The exact text of the exercise notebook generated from ``solution``."""
    nb = annotate(nbformat.read(str(solution), as_version=4))
    ex = clean(copy.deepcopy(nb), keep_outputs=False)
    used = _used_names(ex.cells, solution.name)
    for i, cell in enumerate(ex.cells):
        if BEGIN in cell.source:
            cell.source = strip_solutions(
                cell.source,
                f"{solution.name} cell {i}",
                markdown=cell.cell_type == "markdown",
                used=used,
            )
        _lock_for_students(cell)
    banner = nbformat.v4.new_markdown_cell(_BANNER.format(name=solution.name))
    banner["id"] = "exercise-banner"
    ex.cells.insert(0, banner)
    return dumps(ex)


def _annotated_text(solution: Path) -> str:
    return dumps(annotate(nbformat.read(str(solution), as_version=4)))


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
    """Write ``exercises/`` from ``solutions/`` (and nbgrader metadata into ``solutions/``);
    remove exercises whose solution is gone. Returns the files written."""
    out_dir = Path(exercises_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sources = _solutions(solutions_dir)
    written = []
    for sol in sources:
        annotated = _annotated_text(sol)
        if annotated != sol.read_text():
            sol.write_text(annotated)
            written.append(sol)
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
        if _annotated_text(sol) != sol.read_text():
            problems.append(
                f"{sol} lacks its nbgrader cell metadata (hpclab exercises build adds it)"
            )
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
