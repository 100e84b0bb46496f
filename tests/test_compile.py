"""``hpclab run compile`` (chapter 03): torch.compile against eager on the course's MLP.

Cost: one small compile (forward and backward of the tiny MLP) with Inductor's C++ backend,
~5-10 s on 2 cores (less once Inductor's on-disk cache is warm).
"""

from __future__ import annotations

import os

import psutil
import pytest

from hpclab import experiments
from hpclab.profiling import compile_experiment as C


def test_compile_measures_speedup_and_leaves_no_worker():
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    env = os.environ.get("TORCHINDUCTOR_COMPILE_THREADS")
    # chapter 03's quick-mode run (same model and batch: Inductor's disk cache serves both)
    res = experiments.run("compile", model="tiny", batch_size=64, steps=3, references=False)
    eager, compiled = res.records
    assert (eager["mode"], compiled["mode"]) == ("eager", "default")
    assert eager["speedup"] == 1.0 and eager["compile_s"] == 0.0
    assert compiled["speedup"] == pytest.approx(eager["step_s"] / compiled["step_s"])
    assert compiled["compile_s"] > 0 and compiled["samples_per_s"] > 0
    assert compiled["graph_breaks"] == 0 and compiled["graphs"] == 1
    # Inductor compiled in this process: no compile-worker pool outlives the run
    assert eager["compile_threads"] == compiled["compile_threads"] == 1
    after = psutil.Process().children(recursive=True)
    assert [p.name() for p in after if p.pid not in before] == []
    assert os.environ.get("TORCHINDUCTOR_COMPILE_THREADS") == env
    experiments.get("compile").plot(res)


def test_the_planted_branch_breaks_the_graph_in_two():
    x, _ = C.batch(4, "cpu")
    assert C.graph_breaks(C.build("tiny", False, "cpu"), x) == {
        "graphs": 1, "graph_breaks": 0, "break_reasons": "none"
    }  # fmt: skip
    # a Python branch on a tensor's value: one graph before it, one after
    found = C.graph_breaks(C.build("tiny", True, "cpu"), x)
    assert found["graphs"] == 2 and found["graph_breaks"] == 1
    assert found["break_reasons"] != "none"


def test_without_a_cpp_compiler_the_run_says_so_and_times_eager(monkeypatch):
    monkeypatch.setattr(C.shutil, "which", lambda name: None)
    monkeypatch.delenv("CXX", raising=False)
    res = experiments.run("compile", model="tiny", batch_size=16, steps=2, references=False)
    (eager,) = res.records
    assert eager["mode"] == "eager" and "no C++ compiler" in eager["note"]
    assert "apt-get install g++" in eager["note"]


def test_cli_refuses_an_unknown_mode():
    from hpclab.config import ConfigError

    with pytest.raises(ConfigError, match="modes"):
        C.CompileConfig.create(modes=("fastest",))
