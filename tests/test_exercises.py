from __future__ import annotations

import nbformat
import pytest

from hpclab import exercises
from hpclab.exercises import MarkerError, strip_solutions
from hpclab.notebooks import CHECK_MARK, clean

SOLUTION = """x = 1
def f(a):
    ### BEGIN SOLUTION
    ### HINT: multiply a by two
    return a * 2
    ### END SOLUTION
print(f(x))"""


def test_strip_replaces_block_with_hinted_stub():
    out = strip_solutions(SOLUTION)
    assert "return a * 2" not in out
    assert "    # HINT: multiply a by two" in out
    assert "    raise NotImplementedError('multiply a by two')" in out
    assert out.startswith("x = 1\ndef f(a):") and out.endswith("print(f(x))")
    compile(out, "exercise", "exec")  # still valid Python


def test_markdown_answers():
    assert strip_solutions(
        "Q?\n### BEGIN SOLUTION\nIt is 42.\n### END SOLUTION", markdown=True
    ) == ("Q?\nYOUR ANSWER HERE")


@pytest.mark.parametrize(
    "text",
    ["### BEGIN SOLUTION\nx", "x\n### END SOLUTION", "### BEGIN SOLUTION\n### BEGIN SOLUTION"],
)
def test_unbalanced_markers_are_named(text):
    with pytest.raises(MarkerError):
        strip_solutions(text, "nb cell 3")


def _write_solution(path, body=SOLUTION):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Title"), nbformat.v4.new_code_cell(body)]
    for i, c in enumerate(nb.cells):
        c["id"] = f"cell-{i}"
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="2\n")]
    nbformat.write(nb, str(path))


def test_build_then_check_then_stale(tmp_path):
    sol, ex = tmp_path / "solutions", tmp_path / "exercises"
    sol.mkdir()
    _write_solution(sol / "00_demo.ipynb")
    assert exercises.stale(sol, ex) == [f"{ex / '00_demo.ipynb'} is missing"]
    assert exercises.build(sol, ex) == [ex / "00_demo.ipynb"]
    assert exercises.stale(sol, ex) == []
    assert exercises.build(sol, ex) == []  # idempotent
    built = nbformat.read(str(ex / "00_demo.ipynb"), as_version=4)
    assert "NotImplementedError" in built.cells[2].source and built.cells[2].outputs == []
    _write_solution(sol / "00_demo.ipynb", SOLUTION.replace("x = 1", "x = 2"))
    assert exercises.stale(sol, ex) == [
        f"{ex / '00_demo.ipynb'} differs from what solutions/00_demo.ipynb generates"
    ]
    (ex / "01_orphan.ipynb").write_text("{}")
    assert any("has no solution source" in s for s in exercises.stale(sol, ex))
    exercises.build(sol, ex)
    assert not (ex / "01_orphan.ipynb").exists() and exercises.stale(sol, ex) == []


def test_clean_keeps_only_checked_outputs():
    nb = nbformat.v4.new_notebook(
        metadata={
            "widgets": {"state": "huge"},
            "kernelspec": {"name": "python3", "display_name": "Python 3"},
        }
    )
    a = nbformat.v4.new_code_cell(f"{CHECK_MARK}\nprint(1)", execution_count=3)
    a.outputs = [nbformat.v4.new_output("stream", text="1\n")]
    b = nbformat.v4.new_code_cell("print(2)", execution_count=4)
    b.outputs = [nbformat.v4.new_output("stream", text="2\n")]
    b.metadata["collapsed"] = True
    nb.cells = [a, b]
    out = clean(nb)
    assert "widgets" not in out.metadata
    assert out.cells[0].outputs[0]["text"] == "1\n"
    assert out.cells[0].execution_count == 3  # nbval needs it on cells it compares
    assert out.cells[1].execution_count is None
    assert out.cells[1].outputs == [] and out.cells[1].metadata == {}


def test_repository_exercises_are_up_to_date():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    assert exercises.stale(root / "solutions", root / "exercises") == []
