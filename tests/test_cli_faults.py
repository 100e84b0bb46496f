"""Faults at the command line lose nothing and say one line: a store that cannot take the result,
Ctrl-C at any moment, NaN/inf or empty lists given as options. In-process, under a second each."""

from __future__ import annotations

import json
import math

import pytest

from hpclab import cli

RUN = ["run", "hardware", "--probe-size", "0", "--json", "--save"]


def _run(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        code = cli.main(argv)
        raise SystemExit(code)
    out, err = capsys.readouterr()
    return exit_.value.code, out, err


@pytest.mark.parametrize("damage", ["corrupt", "unwritable"])
def test_save_into_a_broken_store_prints_the_result_and_exits_1(
    damage, tmp_path, monkeypatch, capsys
):
    if damage == "corrupt":
        store = tmp_path / "results.sqlite"
        store.write_bytes(b"this is not an SQLite database" * 100)
    else:  # a path under a regular file: no one, root included, can create it
        (tmp_path / "file").write_text("")
        store = tmp_path / "file" / "results.sqlite"
    monkeypatch.setenv("HPCLAB_RESULTS", str(store))
    code, out, err = _run(RUN, capsys)
    assert code == 1
    result = json.loads(out)  # the result is printed whole
    assert result["experiment"] == "hardware" and result["records"]
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("note: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"result not stored in {store}" in lines[0]
    if damage == "corrupt":
        assert "DatabaseError" in lines[0] and "written to" in lines[0]
        beside = lines[0].split("written to ")[1].split(" instead")[0]
        assert json.loads(open(beside).read())["records"] == result["records"]
    else:
        assert "printed only, not written anywhere" in lines[0]


def _numeric_fields():
    from hpclab import experiments

    for name, exp in sorted(experiments.registry().items()):
        for f in exp.config.describe():
            d = f["default"]
            if isinstance(d, float) or (isinstance(d, int) and not isinstance(d, bool)):
                yield name, exp.config, f["name"]
            elif isinstance(d, tuple) and f["min"] is not None:
                yield name, exp.config, f["name"]


def test_nan_and_infinity_are_refused_by_every_numeric_option():
    from hpclab.config import ConfigError

    fields = list(_numeric_fields())
    assert len(fields) > 50  # every experiment's numbers, not a sample
    for name, config, field in fields:
        for bad in (math.nan, math.inf, -math.inf):
            value = (bad,) if isinstance(getattr(config, field, None), tuple) else bad
            with pytest.raises(ConfigError, match="finite number") as err:
                config.create(**{field: value})
            assert "\n" not in str(err.value), (name, field)


def test_nan_on_the_command_line_is_one_line_exit_2(capsys):
    code, out, err = _run(["run", "requeue", "--step-delay-s", "nan"], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "step_delay_s=nan must be a finite number" in err


def test_an_empty_list_is_an_error_and_auto_chooses(capsys):
    from hpclab.cli import _add_config_flags, _Parser
    from hpclab.search.autotune import AutotuneConfig

    parser = _Parser(prog="t")
    _add_config_flags(parser, AutotuneConfig)
    args = parser.parse_args(["--threads", "1,2", "--ranks", "1", "--batches", "32"])
    cfg = AutotuneConfig.create(**{k: v for k, v in vars(args).items() if v is not None})
    assert (cfg.threads, cfg.ranks, cfg.batches) == ((1, 2), (1,), (32,))  # refused before
    assert parser.parse_args(["--threads", "auto"]).threads == ()  # chosen from the node
    from hpclab.widgets import panel

    box = panel("autotune")  # the notebook's panel reads the same numbers
    box.controls["threads"].value, box.controls["ranks"].value = "1,2", "1"
    assert (box.config().threads, box.config().ranks) == ((1, 2), (1,))
    for argv, fragment in (
        (["--threads", ""], "or 'auto' (choose automatically)"),
        (["--batches", ""], "expected comma-separated int values, got ''"),
        (["--batches", "32,,64"], "got '32,,64'"),
        (["--batches", "auto"], "expected comma-separated int values"),
    ):
        with pytest.raises(SystemExit) as exit_:
            parser.parse_args(argv)
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert fragment in err and len(err.strip().splitlines()) == 1, err
    code, _, err = _run(["run", "dp-by-hand", "--impl", ""], capsys)
    assert code == 2 and "argument --impl" in err and "Traceback" not in err


def test_profile_out_that_cannot_be_written_is_one_line_exit_2(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    code, out, err = _run(["run", "profile", "--out", str(tmp_path / "file" / "sub")], capsys)
    assert code == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and "cannot be written" in err, err


def test_no_slurm_is_an_environment_error_exit_1_naming_what_to_install(monkeypatch, capsys):
    monkeypatch.setenv("PATH", "/nonexistent")  # no sbatch anywhere
    code, out, err = _run(["run", "slurm-hello"], capsys)
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "no sbatch command: install Slurm" in err and "apt-get install" in err


@pytest.mark.parametrize(
    "delay_s",
    [
        0.0,
        0.5,
        1.0,
        1.5,
    ],
)
def test_ctrl_c_early_in_a_run_is_one_line_exit_130(delay_s):
    """Ctrl-C while the CLI imports torch and the experiments, or as the run starts: timed from
    the moment torch starts loading (before that, the interpreter's own start-up and a few
    standard imports take milliseconds on an idle machine and belong to no program)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-m", "hpclab.cli", "run", "search", "--trials", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, HPCLAB_QUICK="1"),
                            # its own process group, as a shell gives a command: whatever its
                            # tree signals to its group never reaches this test process
                            start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            if "libtorch" in open(f"/proc/{proc.pid}/maps").read():
                break
        except OSError:
            pass
        time.sleep(0.01)
    time.sleep(delay_s)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip("the run finished before the signal")  # a very fast machine
    assert proc.returncode == 130, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("forget", [False, True])
def test_a_handled_interrupt_does_not_end_the_process_by_sigint(tmp_path, forget):
    """The mechanism behind a rare -2 after "hpclab: cancelled": CPython marks a KeyboardInterrupt
    that leaves code run through ``PyRun_*`` as unhandled for good, and under ``python -m`` kills
    itself with SIGINT at exit even though the interrupt was caught. Reproduced deterministically;
    the CLI's exit path clears the mark."""
    import os
    import subprocess
    import sys

    (tmp_path / "interrupted_import.py").write_text(
        "import ctypes, sys\n"
        "from hpclab.cli import _forget_interrupt\n"
        "ctypes.pythonapi.PyRun_SimpleString(b'raise KeyboardInterrupt')  # caught and printed\n"
        f"{'_forget_interrupt()' if forget else 'pass'}\n"
        "sys.exit(130)\n"
    )
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-m", "interrupted_import"], capture_output=True,
                          env=dict(os.environ, PYTHONPATH=path), timeout=60)  # fmt: skip
    assert proc.returncode == (130 if forget else -2)
