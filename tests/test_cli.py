"""The CLI contract: one-line errors with exit 2, --json prints exactly one object."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def hpclab(*args, env=None):
    import os

    full_env = {**os.environ, "HPCLAB_QUICK": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "hpclab.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=full_env,
    )


def test_run_list_names_every_experiment():
    from hpclab.experiments import registry

    out = hpclab("run", "--list")
    assert out.returncode == 0
    listed = {line.split()[0] for line in out.stdout.splitlines()}
    assert listed == set(registry())


def test_run_json_is_one_object():
    out = hpclab("run", "hardware", "--probe-size", "64", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)  # fails if anything else is printed
    assert set(data) >= {"experiment", "config", "env", "records"}
    assert data["config"] == {"cores": 0, "probe_size": 64}
    live = [r for r in data["records"] if r["tier"] == "live"]
    assert live and live[0]["gflops"] > 0


@pytest.mark.parametrize(
    "args, fragment",
    [
        (
            ("run", "hardware", "--probe-size", "-5"),
            "probe_size=-5 is out of range; allowed: 0..8192",
        ),
        (("run", "hardware", "--probe-size", "abc"), "invalid int value: 'abc'"),
        (("run", "hardware", "--nope", "1"), "unrecognized arguments: --nope 1"),
        (("run", "nosuch"), "unknown experiment 'nosuch'; known:"),
        (("frobnicate",), "invalid choice: 'frobnicate'"),
        (("exercises", "explode"), "invalid choice: 'explode'"),
    ],
)
def test_bad_arguments_one_line_exit_2(args, fragment):
    out = hpclab(*args)
    assert out.returncode == 2
    assert fragment in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""


def test_doctor_json_has_env_fingerprint_fields():
    out = hpclab("doctor", "--json")
    assert out.returncode in (0, 1), out.stderr
    data = json.loads(out.stdout)
    env = data["env"]
    for key in ("cpu_model", "cores_usable", "clock_ghz", "peak_gflops", "gpus", "torch", "shm_gb"):
        assert key in env
    assert {c["level"] for c in data["checks"]} <= {"ok", "warn", "fail"}


def test_doctor_text_report():
    out = hpclab("doctor")
    assert out.returncode in (0, 1)
    assert "[ok]" in out.stdout or "[warn]" in out.stdout


def test_save_stores_a_run(tmp_path):
    store = tmp_path / "r.sqlite"
    out = hpclab(
        "run",
        "hardware",
        "--probe-size",
        "0",
        "--save",
        "--label",
        "x",
        env={"HPCLAB_RESULTS": str(store)},
    )
    assert out.returncode == 0 and "saved as run 1" in out.stderr
    from hpclab import results

    assert results.history(path=store)["label"].tolist()[0] == "x"


def test_exercises_check_names_stale_file(tmp_path):
    sol = tmp_path / "solutions"
    sol.mkdir()
    import shutil
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    shutil.copy(root / "solutions" / "00_welcome.ipynb", sol)
    out = hpclab("exercises", "check", "--solutions", str(sol), "--exercises", str(tmp_path / "ex"))
    assert out.returncode == 1 and "00_welcome.ipynb is missing" in out.stderr
    assert (
        hpclab(
            "exercises", "build", "--solutions", str(sol), "--exercises", str(tmp_path / "ex")
        ).returncode
        == 0
    )
    assert (
        hpclab(
            "exercises", "check", "--solutions", str(sol), "--exercises", str(tmp_path / "ex")
        ).returncode
        == 0
    )


def test_a_topic_that_cannot_import_takes_only_its_own_experiments(monkeypatch, capsys):
    from hpclab import cli, experiments

    # A chapter whose dependency is missing on this machine (e.g. lmdb on a cluster).
    monkeypatch.setattr(experiments, "TOPICS", (*experiments.TOPICS, "hpclab.no_such_topic"))
    assert "hardware" in experiments.registry()
    assert list(experiments.unavailable()) == ["hpclab.no_such_topic"]
    assert (
        "No module named 'hpclab.no_such_topic'"
        in experiments.unavailable()["hpclab.no_such_topic"]
    )

    assert cli.main(["run", "--list"]) == 0
    out, err = capsys.readouterr()
    assert "hardware" in out and "no_such_topic" not in out
    assert err.count("\n") == 1 and "hpclab.no_such_topic did not load" in err

    with pytest.raises(SystemExit) as exc:
        cli.main(["run", "nosuch"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "unknown experiment 'nosuch'" in err and "hpclab.no_such_topic did not load" in err


def test_a_killed_rank_is_named_first_in_one_message_exit_1():
    """kill -9 on rank 1 of a 2-rank ddp run: the dead rank first, no traceback of the CLI."""
    import os
    import signal
    import time

    import psutil

    cli = subprocess.Popen(
        [sys.executable, "-m", "hpclab.cli", "run", "ddp", "--ranks", "2", "--steps", "10000"]
        + ["--no-baseline", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HPCLAB_QUICK": "1"},
    )
    me = psutil.Process(cli.pid)
    deadline = time.monotonic() + 60
    ranks = []
    while time.monotonic() < deadline and len(ranks) < 2:
        ranks = [p for p in me.children() if p.name().startswith("hpclab-rank")]
        time.sleep(0.05)
    victim = next(p for p in ranks if p.name() == "hpclab-rank1")
    time.sleep(1.0)  # mid-training
    victim.send_signal(signal.SIGKILL)
    first = cli.stderr.readline()
    err = first + cli.stderr.read()  # the pipe's end: the CLI has exited
    assert cli.wait(timeout=30) == 1 and cli.stdout.read() == ""
    lines = err.strip().splitlines()
    assert lines[0] == "hpclab: error: rank 1 of 2 was killed by SIGKILL (signal 9)", err
    assert lines[1].startswith("  then: rank 0 of 2 ") and "Traceback" not in err
    _, alive = psutil.wait_procs(ranks, timeout=3)
    assert not alive


def test_a_corrupt_data_file_is_not_a_bad_argument(tmp_path):
    # (a missing one: tests/test_storage_errors.py)
    from hpclab.storage import pack
    from hpclab.storage.data import SyntheticImages

    pack(SyntheticImages(64, (3, 8, 8)), "memmap", tmp_path / "ds")
    victim = tmp_path / "ds" / "x.npy"
    victim.write_bytes(victim.read_bytes()[:100])  # truncated: the writer wrote more
    corrupt = hpclab("run", "storage-read", "--format", "memmap", "--path", str(tmp_path / "ds"))
    assert corrupt.returncode == 1, corrupt.stderr
    assert str(victim) in corrupt.stderr and "Traceback" not in corrupt.stderr
    assert len(corrupt.stderr.strip().splitlines()) == 1
