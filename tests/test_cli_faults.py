"""Faults at the command line lose nothing and say one line: a store that cannot take the result,
Ctrl-C at any moment, NaN/inf or empty lists given as options. In-process, under a second each."""

from __future__ import annotations

import json

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
        assert "FileExistsError" in lines[0] and "printed only" in lines[0]
