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
    # the hint is a comment; the exception says only that the exercise is not done
    assert "    raise NotImplementedError('exercise not done yet" in out
    assert "multiply" not in out.split("raise")[1]
    assert out.startswith("x = 1\ndef f(a):") and out.endswith("print(f(x))")
    compile(out, "exercise", "exec")  # still valid Python


TOP_LEVEL = """probe = 3
### BEGIN SOLUTION
### HINT: think
helper = probe * 2
answer = helper + 1
### END SOLUTION"""


def test_a_top_level_block_binds_its_used_names_to_ellipsis():
    # "Run All" must not stop here: the stub defines what later cells read, as `...`, and the
    # check below says "not yet".
    out = strip_solutions(TOP_LEVEL, used={"answer", "probe"})
    assert out.splitlines()[-1] == "answer = ..." and "helper" not in out
    assert "raise" not in out
    ns: dict = {}
    exec(compile(out, "exercise", "exec"), ns)
    assert ns["answer"] is Ellipsis


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
    lacks = (
        f"{sol / '00_demo.ipynb'} lacks its nbgrader cell metadata (hpclab exercises build adds it)"
    )
    assert exercises.stale(sol, ex) == [lacks, f"{ex / '00_demo.ipynb'} is missing"]
    assert exercises.build(sol, ex) == [sol / "00_demo.ipynb", ex / "00_demo.ipynb"]
    assert exercises.stale(sol, ex) == []
    assert exercises.build(sol, ex) == []  # idempotent
    built = nbformat.read(str(ex / "00_demo.ipynb"), as_version=4)
    assert "NotImplementedError" in built.cells[2].source and built.cells[2].outputs == []
    # build also wrote nbgrader roles into the solution, and check now wants them there
    assert nbformat.read(str(sol / "00_demo.ipynb"), as_version=4).cells[1].metadata["nbgrader"]
    _write_solution(sol / "00_demo.ipynb", SOLUTION.replace("x = 1", "x = 2"))
    assert exercises.stale(sol, ex) == [
        lacks,
        f"{ex / '00_demo.ipynb'} differs from what solutions/00_demo.ipynb generates",
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


def test_checks_say_not_yet_for_every_unsolved_form(monkeypatch):
    from hpclab.check import cost_model, solved, welcome

    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    r = welcome.peak(..., {"cores_usable": 1})
    assert not r.passed and "replace the `...`" in r.message

    def stub(nbytes, seconds, ranks):
        # HINT: a nudge
        raise NotImplementedError("exercise not done yet: replace this line with your code")

    r = cost_model.busbw(stub, 1e6, 1e-3, 2)
    assert not r.passed and "stub is not written yet" in r.message
    assert not solved(stub)


def test_grading_mode_prints_the_feedback_then_raises(monkeypatch, capsys):
    from hpclab.check import CheckFailed, welcome

    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")  # what nbgrader autograde sets
    with pytest.raises(CheckFailed):
        welcome.peak(..., {"cores_usable": 1})
    assert "NOT YET: the exercise is not done yet" in capsys.readouterr().out
    info = {"cores_usable": 2, "cores_node": 2, "clock_ghz": 3.0, "flops_per_cycle": {"fp32": 32}}
    right = lambda i: (  # noqa: E731
        (i.get("cores_physical") or i["cores_usable"])
        * i["clock_ghz"]
        * i["flops_per_cycle"]["fp32"]
    )
    assert welcome.peak(right, info).passed  # a right answer does not raise


def _cells(*specs):
    nb = nbformat.v4.new_notebook()
    for kind, src in specs:
        make = nbformat.v4.new_code_cell if kind == "code" else nbformat.v4.new_markdown_cell
        nb.cells.append(make(src))
    return nb


def test_annotate_gives_nbgrader_roles_from_markers_and_check_cells():
    nb = _cells(
        ("md", "# Exercise"),
        ("code", "from hpclab.check import compute as check\nx = 1"),
        ("code", "### BEGIN SOLUTION\ny = 2\n### END SOLUTION"),
        ("code", "# NBVAL_CHECK_OUTPUT\ncheck.gemm_flops(y, 1, 1, 1)"),
        ("code", "from hpclab.check.welcome import peak\n\npeak(y)"),
        ("code", "print(y)"),
        ("code", "from hpclab.check import hint\n\nhint('peak')"),
        ("md", "Why?\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION"),
    )
    roles = [c.metadata.get("nbgrader") for c in exercises.annotate(nb).cells]
    assert roles[0]["locked"] and not roles[0]["grade"]
    assert roles[1] is None  # ordinary code stays editable and ungraded
    assert roles[2]["solution"] and not roles[2]["grade"] and roles[2]["grade_id"] == "answer-1"
    for r, gid in ((roles[3], "check-1"), (roles[4], "check-2")):
        assert r["grade"] and r["locked"] and r["points"] == 1 and r["grade_id"] == gid
    assert roles[5] is None and roles[6] is None  # asking for a hint is not a check
    assert roles[7]["solution"] and roles[7]["grade"] and roles[7]["points"] == 0
    assert all(r["schema_version"] == 3 for r in roles if r)


def test_every_check_goes_through_exercise_check():
    """One behaviour for every exercise: unsolved says NOT YET, grading mode raises (chapter 00)."""
    import importlib
    import inspect
    import pkgutil

    import hpclab.check

    helpers = {"cases"}  # the checks' shared helpers (as hpclab.check's own), not checks
    bare = []
    for mod in pkgutil.iter_modules(hpclab.check.__path__):
        if mod.name in helpers:
            continue
        module = importlib.import_module(f"hpclab.check.{mod.name}")
        for name, fn in vars(module).items():
            if (
                name.startswith("_")
                or not inspect.isfunction(fn)
                or fn.__module__ != module.__name__
            ):
                continue
            if "CheckResult" in str(inspect.signature(fn).return_annotation) and not hasattr(
                fn, "__wrapped__"
            ):
                bare.append(f"{module.__name__}.{name}")
    assert not bare, f"checks without @exercise_check: {bare}"
