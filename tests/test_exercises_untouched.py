"""Run All on every untouched exercise notebook reaches its last cell, and every check in it says
NOT YET (issue 21: "Every exercise notebook runs top to bottom untouched").

Cost: the ten notebooks run in one kernel (quick mode), each in a cleared namespace, so imports
are paid once. Cells that only measure or plot, use no answer of the student and are identical
to a cell of the solution notebook (which nbval executes in CI) are not run again here: the names
they bind become a placeholder, so that later cells still evaluate. Every answer cell, every
check cell and every cell that uses an answer runs. About 30-45 s on 2 busy cores.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest

from hpclab.environ import environ
from hpclab.exercises import BEGIN, END, _check_names, _loaded_names, _stored_names

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "exercises").glob("[0-9][0-9]_*.ipynb"))
MEASURES = re.compile(r"experiments\.run\(|\.plot\(|plot_\w+\(")
# Run first in the kernel: a placeholder for what a skipped measurement cell binds (any
# attribute, item or call gives itself back, it formats as "(skipped)"), and a namespace reset
# that keeps imported modules (IPython's %reset costs seconds per notebook).
SETUP = """
class _Skipped:
    def __getattr__(self, name): return self
    def __getitem__(self, key): return self
    def __call__(self, *a, **k): return self
    def __iter__(self): return iter(())
    def __format__(self, spec): return "(skipped)"
_SKIPPED = _Skipped()
def _clear():
    ns = get_ipython().user_ns
    for k in [k for k in ns if not k.startswith("_") and k not in get_ipython().user_ns_hidden]:
        del ns[k]
"""


def _answer_names(solution: list) -> set[str]:
    """Names the student's answers bind: what a top-level statement of a solution notebook
    that overlaps a solution block defines (a function around a block: its name only)."""
    names: set[str] = set()
    for cell in solution:
        if cell.cell_type != "code" or BEGIN not in cell.source:
            continue
        lines = [line.strip() for line in cell.source.splitlines()]
        begins = [i + 1 for i, line in enumerate(lines) if line.startswith(BEGIN)]
        ends = [i + 1 for i, line in enumerate(lines) if line.startswith(END)]
        for node in ast.parse(cell.source).body:
            first, last = node.lineno, node.end_lineno or node.lineno
            if not any(first <= e and b <= last for b, e in zip(begins, ends, strict=True)):
                continue
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.add(node.name)
            else:
                segment = ast.get_source_segment(cell.source, node) or ""
                names |= set(_stored_names(segment.splitlines()))
    return names


def _check_calls(source: str, checks: set[str]) -> int:
    """How many calls of a check (a name imported from hpclab.check) a cell makes."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return 0
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            while isinstance(func, ast.Attribute):
                func = func.value
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if isinstance(func, ast.Name) and func.id in checks and name not in ("solved", "hint"):
                count += 1
    return count


def _skipped(source: str) -> str:
    """What stands in for a skipped cell: its imports, and a placeholder for each other name."""
    tree = ast.parse(source)
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    imported = {(a.asname or a.name).split(".")[0] for n in imports for a in n.names}
    bound = [n for n in _stored_names(source.splitlines()) if n not in imported] or ["_"]
    lines = [ast.get_source_segment(source, n) or "" for n in imports]
    return "\n".join([*lines, " = ".join([*bound, "_SKIPPED"])])


def _plan(path: Path) -> tuple[list, list[tuple[int, int]]]:
    """The cells to run for one exercise notebook, and (cell index, check calls) per cell kept."""
    nb = nbformat.read(str(path), as_version=4)
    solution = nbformat.read(str(ROOT / "solutions" / path.name), as_version=4)
    solution_cells = {c.get("id"): c.source for c in solution.cells}
    checks = _check_names(nb.cells) - {"solved", "hint"}
    answers = _answer_names(solution.cells)
    cells = [nbformat.v4.new_code_cell(f"_clear()\n# {path.name}")]
    kept = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        calls = _check_calls(cell.source, checks)
        skip = (
            MEASURES.search(cell.source)
            and not calls
            and not cell.metadata.get("nbgrader", {}).get("solution")
            and not (_loaded_names(cell.source) & answers)
            and solution_cells.get(cell.get("id")) == cell.source
            and BEGIN not in cell.source
        )
        if skip:
            cells.append(nbformat.v4.new_code_cell(_skipped(cell.source)))
        else:
            cells.append(nbformat.v4.new_code_cell(cell.source))
            kept.append((len(cells) - 1, i, calls))
    return cells, kept


def _text(cell) -> str:
    out = []
    for o in cell.outputs:
        if o.output_type == "stream":
            out.append(o.text)
        elif o.output_type in ("execute_result", "display_data"):
            out.append(o.get("data", {}).get("text/plain", ""))
    return "".join(out)


@pytest.fixture(scope="module")
def executed():
    from nbclient import NotebookClient

    big = nbformat.v4.new_notebook()
    big.cells.append(nbformat.v4.new_code_cell(SETUP))
    spans = {}
    for path in NOTEBOOKS:
        cells, kept = _plan(path)
        start = len(big.cells)
        big.cells.extend(cells)
        spans[path.name] = [(start + j, i, calls) for j, i, calls in kept]
    env = {"HPCLAB_QUICK": "1", "CI": "true", "PLOTLY_RENDERER": "plotly_mimetype"}
    with environ(env, unset=("HPCLAB_GRADING", "NBGRADER_EXECUTION")):
        NotebookClient(
            big,
            timeout=600,
            kernel_name="python3",
            allow_errors=True,  # every notebook runs; an error output is where Run All stops
            resources={"metadata": {"path": str(ROOT / "exercises")}},
            store_widget_state=False,
        ).execute()
    return big, spans


def test_every_exercise_notebook_is_covered():
    solutions = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
    assert len(NOTEBOOKS) >= 11, [p.name for p in NOTEBOOKS]  # 00 to 09 part 1
    assert [p.name for p in NOTEBOOKS] == [p.name for p in solutions]


@pytest.mark.parametrize("name", [p.name for p in NOTEBOOKS])
def test_untouched_notebook_reaches_its_last_cell_with_every_check_not_yet(executed, name):
    big, spans = executed
    errors, verdicts = [], []
    for pos, index, calls in spans[name]:
        cell = big.cells[pos]
        for o in cell.outputs:
            if o.output_type == "error":
                errors.append(f"cell {index}: {o.ename}: {o.evalue}")
        text = _text(cell)
        assert "PASS:" not in text, f"{name} cell {index}: a check passed untouched: {text}"
        if "solved(" in big.cells[pos].source:  # a cell that uses an answer waits for it
            assert "finish exercise" in text, f"{name} cell {index}: {text!r}"
        if calls:
            said = text.count("NOT YET:")
            assert said == calls, f"{name} cell {index}: {calls} checks, {said} NOT YET: {text!r}"
            verdicts.append(text)
    assert not errors, f"Run All on {name} stops at " + "; ".join(errors)
    assert verdicts, f"{name}: no check ran"
    assert big.cells[spans[name][-1][0]].execution_count is not None
