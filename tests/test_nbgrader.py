"""nbgrader 0.9 on a copy of the course: an instructor's generate_assignment and autograde work.

``hpclab exercises build`` writes the cell metadata nbgrader expects into solutions/; here real
nbgrader releases chapter 00, then autogrades two submissions: the solution (full marks) and the
exercise notebook a student gets from ``exercises/`` untouched (zero). The check cells are the
tests: under nbgrader (NBGRADER_EXECUTION) a check that does not pass raises after printing its
feedback. The released notebook is the exercise notebook but for the stubs' text.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

pytest.importorskip("nbgrader")

ROOT = Path(__file__).resolve().parents[1]
NAME = "00_welcome.ipynb"


def _nbgrader(course: Path, *args: str) -> str:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # alembic
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    env.pop("NBGRADER_EXECUTION", None)
    proc = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args],
        cwd=course,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def _roles(nb) -> list[tuple]:
    out = []
    for c in nb.cells:
        m = c.metadata.get("nbgrader")
        if m:
            out.append((c.cell_type, m["grade_id"], m["solution"], m["grade"], m["locked"]))
    return out


@pytest.mark.timeout(600)
def test_generate_and_autograde_give_full_marks_and_zero(tmp_path):
    course = tmp_path / "course"
    (course / "source" / "ps0").mkdir(parents=True)
    (course / "nbgrader_config.py").write_text(
        'c = get_config()\nc.CourseDirectory.course_id = "hpclab"\n'
        f"c.CourseDirectory.root = {str(course)!r}\n"
    )
    shutil.copy(ROOT / "solutions" / NAME, course / "source" / "ps0" / NAME)
    _nbgrader(course, "generate_assignment", "ps0", "--force")

    # The release is our exercise notebook, cell for cell, but for the stubs' text.
    release = nbformat.read(str(course / "release" / "ps0" / NAME), as_version=4)
    exercise = nbformat.read(str(ROOT / "exercises" / NAME), as_version=4)
    ours = nbformat.v4.new_notebook(cells=[c for c in exercise.cells if c.get("metadata")])
    assert _roles(release) == _roles(ours) and _roles(release)
    for a, b in zip(release.cells, exercise.cells[1:], strict=True):  # [0]: our banner
        if not a.metadata.get("nbgrader", {}).get("solution"):
            assert a.source == b.source

    for student, src in (("solved", ROOT / "solutions"), ("untouched", ROOT / "exercises")):
        (course / "submitted" / student / "ps0").mkdir(parents=True)
        shutil.copy(src / NAME, course / "submitted" / student / "ps0" / NAME)
    log = _nbgrader(course, "autograde", "ps0", "--force", "--create")
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        scores = {
            s: (gb.find_submission("ps0", s).score, gb.find_submission("ps0", s).max_score)
            for s in ("solved", "untouched")
        }
    print(scores)  # the run's real scores, for the record
    checks = sum(1 for r in _roles(release) if r[3] and r[0] == "code")
    assert checks >= 2
    assert scores["solved"] == (checks, checks), log[-2000:]
    assert scores["untouched"] == (0.0, checks), log[-2000:]
    graded = nbformat.read(str(course / "autograded" / "untouched" / "ps0" / NAME), as_version=4)
    feedback = "".join(
        o.get("text", "") for c in graded.cells if c.cell_type == "code" for o in c.outputs
    )
    assert "NOT YET: the exercise is not done yet" in feedback  # friendly text, then the raise
