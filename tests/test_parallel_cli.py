"""Chapter 06 part 2 on the command line: stable names, one JSON object, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def hpclab(*args):
    env = {**os.environ, "HPCLAB_QUICK": "1"}
    return subprocess.run(
        [sys.executable, "-m", "hpclab.cli", *args], capture_output=True, text=True, timeout=180,
        env=env,
    )  # fmt: skip


def test_pipeline_json_carries_the_bubble():
    out = hpclab(
        "run", "pipeline", "--stages", "2", "--micro-batches", "4", "--batch-size", "32",
        "--layers", "4", "--width", "32", "--schedules", "gpipe", "--json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    (row,) = [r for r in data["records"] if r["kind"] == "schedule"]
    assert row["bubble_model"] == pytest.approx(1 / 5) and 0 <= row["bubble_measured"] < 1


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("dp-by-hand", "--impl", "naive,fast"), "impl='fast' is not allowed; allowed: one of"),
        (("pipeline", "--batch-size", "50", "--micro-batches", "8"), "nearest valid: 48, 56"),
        (("tensor-parallel", "--ranks", "3"), "in_features=1024 is not divisible by ranks=3"),
        (("parallel-memory", "--blocks", "3"), "blocks=3 is not divisible by ranks=2"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, fragment, capsys):
    from hpclab.cli import main

    with pytest.raises(SystemExit) as info:  # in-process: the refusal comes before any launch
        main(["run", *args])
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    assert fragment in err and len(err.strip().splitlines()) == 1, err
