"""Tiered hints (issue 22 section 2) and checks that say what they expected (issue 21 section 2).

Cost: about a second; no check body runs a measurement here.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from hpclab.check import CheckFailed, exercise_check, failed, hint
from hpclab.check.hints import TOPICS, exercises
from hpclab.exercises import BEGIN, END

ROOT = Path(__file__).resolve().parents[1]


def _checks_used_by_notebooks() -> set[str]:
    """The real names of the check functions the exercise notebooks call."""
    used = set()
    for path in sorted((ROOT / "exercises").glob("[0-9][0-9]_*.ipynb")):
        cells = [c for c in nbformat.read(str(path), as_version=4).cells if c.cell_type == "code"]
        aliases: dict[str, str] = {}  # name in the notebook -> check name, or "" for a module
        for cell in cells:
            for node in ast.walk(ast.parse(cell.source)):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "hpclab.check"
                ):
                    for a in node.names:
                        is_module = node.module == "hpclab.check" and a.name in TOPICS
                        aliases[a.asname or a.name] = "" if is_module else a.name
        for cell in cells:
            for node in ast.walk(ast.parse(cell.source)):
                if not isinstance(node, ast.Call):
                    continue
                f = node.func
                if isinstance(f, ast.Name) and aliases.get(f.id):
                    used.add(aliases[f.id])
                elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                    if aliases.get(f.value.id) == "":
                        used.add(f.attr)
    return used - {"solved", "hint"}


def _check(name: str):
    for topic in TOPICS:
        module = importlib.import_module(f"hpclab.check.{topic}")
        if hasattr(module, name):
            return getattr(module, name)
    raise AssertionError(f"no check {name} in hpclab.check.<topic>")


def test_every_exercise_of_the_ten_chapters_has_one_to_three_tiers():
    used = _checks_used_by_notebooks()
    assert len(used) >= 39, sorted(used)
    missing = used - set(exercises())
    assert not missing, f"exercises without hints: {sorted(missing)}"
    for ex in exercises().values():
        assert 1 <= len(ex.hints) <= 3
        fn = _check(ex.check)
        assert hasattr(fn, "__wrapped__"), f"{ex.check} is not an @exercise_check"
        params = list(inspect.signature(fn).parameters)
        assert len(ex.answers) <= len(params)


def test_hints_are_revealed_one_tier_at_a_time():
    first, second = hint("ring"), hint("ring", 2)
    assert str(first).startswith("HINT 1 of 3 for ring: ") and 'More: hint("ring", 2).' in str(
        first
    )
    assert str(second).startswith("HINT 2 of 3 for ring: ")
    assert exercises()["ring"].hints[1] in str(second)
    assert exercises()["ring"].hints[1] not in str(first)
    assert str(hint("ring", 3)).endswith("(the last hint)")


@pytest.mark.parametrize("n", [4, 0, -1, "2", 2.0, True])
def test_a_tier_that_does_not_exist_gets_one_line(n):
    text = str(hint("pipeline", n))
    assert text == f"pipeline has 3 hints (1 to 3); you asked for {n!r}"
    assert "\n" not in text


def test_an_unknown_exercise_gets_one_line_naming_the_closest_id():
    text = str(hint("piplene"))
    assert (
        "\n" not in text and "no exercise 'piplene'" in text and 'did you mean "pipeline"' in text
    )


def _solution_code_lines() -> set[str]:
    """Every code line of every solution block, without spaces (lines of 12+ characters)."""
    lines = set()
    for path in sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")):
        for cell in nbformat.read(str(path), as_version=4).cells:
            inside = False
            for line in cell.source.splitlines():
                s = line.strip()
                if s.startswith(BEGIN) or s.startswith(END):
                    inside = s.startswith(BEGIN)
                elif inside and cell.cell_type == "code" and not s.startswith("#"):
                    squeezed = re.sub(r"\s+", "", s)
                    if len(squeezed) >= 12:
                        lines.add(squeezed)
    return lines


def test_no_hint_gives_a_line_of_the_solution_code():
    code = _solution_code_lines()
    assert len(code) > 60
    for ex in exercises().values():
        for tier in ex.hints:
            squeezed = re.sub(r"\s+", "", tier)
            leaked = [line for line in code if line in squeezed]
            assert not leaked, f"{ex.check}: a hint contains solution code {leaked}"


def test_the_exercise_stubs_point_to_the_tiers_not_to_an_answer():
    for path in sorted((ROOT / "exercises").glob("[0-9][0-9]_*.ipynb")):
        for cell in nbformat.read(str(path), as_version=4).cells:
            for line in cell.source.splitlines():
                if line.strip().startswith("# HINT:"):
                    m = re.search(r'hint\("(\w+)"\)', line)
                    assert m and m.group(1) in exercises(), f"{path.name}: {line.strip()}"


def test_a_not_yet_message_suggests_the_hint():
    from hpclab.check import topology

    r = topology.pipeline(lambda c, k, n: n * (c + k))
    assert not r.passed and r.message.endswith(
        'Stuck? from hpclab.check import hint; hint("pipeline")'
    )
    assert "serial loop" in r.message


# --- a check given a value of the wrong type says what it expected ---------------------------


def _stub(*args, **kwargs):
    raise NotImplementedError("exercise not done yet: replace this line with your code")


WRONG = {
    "a pandas Series": pd.Series([1.0, 2.0]),
    "a string": "forty-two",
    "None": None,
    "Ellipsis": ...,
    "a stub": _stub,
}
VALID = {
    "function": lambda *a, **k: 0,
    "class": type("Answer", (), {}),
    "number": 1.0,
    "text": "x",
    "collection": [],
    "any": object(),
}


def _calls():
    for ex in exercises().values():
        for position, (kind, _) in enumerate(ex.answers):
            for label, value in WRONG.items():
                if kind == "any" and label == "a string":
                    continue  # 'any' answers: the check names the type itself
                args = [VALID[k] for k, _ in ex.answers]
                args[position] = value
                yield pytest.param(ex.check, args, label, id=f"{ex.check}-{position}-{label}")


@pytest.mark.parametrize(("name", "args", "label"), list(_calls()))
def test_a_wrong_type_says_what_was_expected(name, args, label, monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.delenv("HPCLAB_GRADING", raising=False)
    fn = _check(name)
    context = CONTEXT.get(name, ())
    r = fn(*args, *context)
    assert not r.passed
    first = r.message.split(" Stuck?")[0]
    assert "\n" not in first
    if label in ("Ellipsis", "a stub"):
        assert "not done yet" in first or "not written yet" in first, first
    else:
        assert re.search(r"expects|expected|should be|itself|^give |^answer ", first), first


# Arguments after the answers, where a check needs them (never reached with a wrong type).
CONTEXT = {
    "peak": ({"cores_usable": 1},),
    "fraction_of_peak": (1.0, {"cores_usable": 1}),
    "gemm_flops": (1, 2, 3),
    "peak_fraction": (1.0, 2.0),
    "roof": (0.1, 100.0, 10.0),
    "crossover": (1e-5, 1e10, 1e-3, 1e12),
    "matmul_bound": ([],),
    "workers": ({1: 1.0},),
    "busbw": (1e6, 1e-3, 2),
    "efficiency_prediction": (0.01, 1e6, 2, 1e-5, 1e9),
    "faster_strategy": ([], 1.0),
}


def test_grading_mode_raises_on_a_wrong_type(monkeypatch, capsys):
    from hpclab.check import topology

    monkeypatch.setenv("HPCLAB_GRADING", "1")
    with pytest.raises(CheckFailed):
        topology.pcie_bandwidth(pd.Series([1, 2]))
    assert "pass your function itself" in capsys.readouterr().out


def test_a_check_that_raises_on_an_answer_answers_instead(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.delenv("HPCLAB_GRADING", raising=False)

    @exercise_check
    def pipeline(fn):  # the id of a real exercise, so the expectation has words
        return failed("unused") if fn(1) else failed("unused")

    r = pipeline(lambda x: x["key"])
    assert not r.passed
    assert "could not use your answer (TypeError: 'int' object is not subscriptable)" in r.message
    assert "overlapped_seconds(copy_s, compute_s, steps)" in r.message


# --- hints the checks show for a specific mistake are true for that mistake ------------------


def test_array_plan_without_throttle_is_wrong_only_when_gpus_are_fewer_than_trials():
    from hpclab.check.cluster import check_array_plan

    # Today's message claimed "all 6 tasks may start at once although only 8 GPUs are yours"
    # for 6 trials on 8 GPUs, then accepted "0-5%8", which lets all 6 start at once too.
    only_when_needed = check_array_plan(lambda n, k: f"0-{n - 1}" + (f"%{k}" if k < n else ""))
    assert only_when_needed.passed, only_when_needed.message
    never = check_array_plan(lambda n, k: f"0-{n - 1}")
    assert not never.passed
    assert "'0-15' has no %throttle: all 16 tasks may start at once" in never.message
    assert "only 4 GPUs" in never.message


@pytest.mark.parametrize(
    "cpu_lat, cpu_rate, gpu_lat, gpu_rate",
    [(2e-6, 1e11, 2e-5, 1e13), (1e-5, 5e10, 1e-4, 4e12), (5e-6, 2e11, 3e-5, 2e12)],
)
def test_crossover_names_the_square_root_mistake_when_it_is_made(
    cpu_lat, cpu_rate, gpu_lat, gpu_rate
):
    from hpclab.check.compute import crossover

    def work(cl, cr, gl, gr):
        return (gl - cl) / (1 / cr - 1 / gr)

    squared = crossover(lambda *c: (work(*c) / 2) ** 0.5, cpu_lat, cpu_rate, gpu_lat, gpu_rate)
    assert not squared.passed and "n^3, not n^2" in squared.message
    off = crossover(
        lambda *c: 2**0.5 * (work(*c) / 2) ** (1 / 3), cpu_lat, cpu_rate, gpu_lat, gpu_rate
    )
    assert "n^3, not n^2" not in off.message  # a ratio of sqrt(2) is not that mistake


def _mistakes():
    """(label, check call, words of the hint it must show): each wrong answer makes exactly the
    mistake that its hint describes."""
    from hpclab.check import compute as C
    from hpclab.check import cost_model as D
    from hpclab.check import parallel as P
    from hpclab.check import storage as S
    from hpclab.check import topology as T
    from hpclab.check import welcome as W

    rate = {1: 2.5, 2: 5, 3: 8, 4: 16, 5: 32, 6: 64}
    eff = {1: 0.8, 2: 0.8, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130, 6: 242 / 256}
    link = lambda b, g: b / (g * 1e9)  # noqa: E731
    ring = lambda b, s, n: b / s / 1e9 * 2 * (n - 1) / n  # noqa: E731
    fits = (2e-6, 1e11, 2e-5, 1e13)
    info = {"cores_usable": 2, "cores_node": 8, "clock_ghz": 3.65, "flops_per_cycle": {"fp32": 32}}
    p = 0.5 * 2 * 3.65 * 32
    table = {0: 100.0, 1: 200.0, 2: 210.0}
    return [
        ("raw rate", lambda: T.pcie_bandwidth(lambda g, x: rate[g] * x / 8), "raw signalling"),
        ("both ways", lambda: T.pcie_bandwidth(lambda g, x: rate[g] * x * eff[g] / 4), "both"),
        ("bits", lambda: T.pcie_bandwidth(lambda g, x: rate[g] * x * eff[g]), "divide by 8"),
        ("GiB", lambda: T.copy_time(lambda b, lk, h, pin: link(b, lk) * 1e9 / 2**30), "2**30"),
        ("unstaged", lambda: T.copy_time(lambda b, lk, h, pin: link(b, lk)), "staged"),
        (
            "staged pinned",
            lambda: T.copy_time(lambda b, lk, h, pin: link(b, lk) + link(b, h)),
            "no staging",
        ),  # fmt: skip
        ("serial", lambda: T.pipeline(lambda c, k, n: n * (c + k)), "serial loop"),
        ("no fill", lambda: T.pipeline(lambda c, k, n: n * max(c, k)), "nothing to hide"),
        ("macs", lambda: C.gemm_flops(512 * 384 * 96, 512, 384, 96), "multiply-adds"),
        (
            "percent",
            lambda: C.peak_fraction(lambda g, i: 100 * g / p, p / 2, p, info),
            "not a percentage",
        ),
        (
            "inverse",
            lambda: C.peak_fraction(lambda g, i: p / g, p / 2, p, info),
            "divided the peak",
        ),
        ("no write", lambda: C.add_intensity(1 / 8), "write of c"),
        ("per element", lambda: C.add_intensity(1 / 3), "per byte"),
        (
            "n^3 = w",
            lambda: C.crossover(
                lambda cl, cr, gl, gr: ((gl - cl) / (1 / cr - 1 / gr)) ** (1 / 3), *fits
            ),
            "2 n^3 FLOPs",
        ),
        ("busy over idle", lambda: P.bubble(lambda p_, m: (p_ - 1) / m), "relative to the busy"),
        ("m = 1", lambda: P.bubble(lambda p_, m: (p_ - 1) / p_), "naive schedule"),
        ("floor", lambda: P.micro_batches(lambda p_, t: int((p_ - 1) * (1 - t) / t)), "round up"),
        ("algbw", lambda: D.busbw(lambda b, s, n: b / s / 1e9, 4e6, 1e-3, 2), "that is algbw"),
        (
            "no /n",
            lambda: D.busbw(lambda b, s, n: 2 * (n - 1) * b / s / 1e9, 4e6, 1e-3, 2),
            "left out the /n",
        ),  # fmt: skip
        ("bits/s", lambda: D.busbw(lambda b, s, n: 8 * ring(b, s, n), 4e6, 1e-3, 2), "Gbit/s"),
        ("MiB", lambda: S.read_bandwidth(3000 * 110e3 / 2**20, 3000, 3000 / 1024), "not MiB"),
        ("megabits", lambda: S.read_bandwidth(3000 * 110e3 * 8 / 1e6, 3000, 3), "megabits"),
        ("per file", lambda: S.read_bandwidth(330, 3000, 3000), "one open serves 1024"),
        ("kB 1024", lambda: S.read_bandwidth(337.92, 3000, 3000 / 1024), "not 1024"),
        ("shard floor", lambda: S.read_bandwidth(330, 3000, 3000 // 1024), "need not be whole"),
        ("no workers", lambda: S.workers(lambda t: 0, table), "decodes every batch itself"),
        ("extra workers", lambda: S.workers(lambda t: 2, table), "1 already are"),
        ("fraction %", lambda: W.fraction_of_peak(50.0, p, info), "not a percentage"),
        ("fraction inverse", lambda: W.fraction_of_peak(2.0, p, info), "divided the peak"),
    ]


@pytest.mark.parametrize(("label", "call", "words"), _mistakes(), ids=lambda v: str(v)[:20])
def test_a_mistake_hint_is_shown_for_the_mistake_it_names(label, call, words, monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.delenv("HPCLAB_GRADING", raising=False)
    r = call()
    assert not r.passed and words in r.message, f"{label}: {r.message}"
