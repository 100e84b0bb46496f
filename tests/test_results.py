from __future__ import annotations

import json

import pytest

from hpclab import results
from hpclab.results import Result, load_reference, make_result


def test_make_result_carries_fingerprint_and_tier():
    r = make_result("demo", {"size": 3}, [{"gflops": 1.5}, {"tier": "model", "gflops": 2.0}])
    assert r.records[0]["tier"] == "live" and r.records[1]["tier"] == "model"
    for key in ("host", "cpu_model", "cores_usable", "clock_ghz", "torch", "hpclab", "time"):
        assert key in r.env
    assert list(r.frame()["gflops"]) == [1.5, 2.0]
    again = Result.from_dict(json.loads(r.to_json()))
    assert again.records == r.records and again.config == {"size": 3}


def test_store_roundtrip_and_history(tmp_path):
    path = tmp_path / "r.sqlite"
    a = make_result("demo", {"n": 1}, [{"gflops": 1.0}])
    b = make_result("demo", {"n": 2}, [{"gflops": 2.0}, {"gflops": 3.0}])
    ida = results.save(a, label="cpu node", path=path)
    idb = results.save(b, path=path)
    assert idb == ida + 1
    assert results.load(idb, path=path).records == b.records
    df = results.history("demo", path=path)
    assert list(df["gflops"]) == [1.0, 2.0, 3.0]
    assert list(df["label"]) == ["cpu node", "", ""]
    with pytest.raises(KeyError, match="no saved result with id 99"):
        results.load(99, path=path)


def test_env_var_selects_store(tmp_path, monkeypatch):
    monkeypatch.setenv("HPCLAB_RESULTS", str(tmp_path))
    assert results.store_path() == tmp_path / "results.sqlite"
    run_id = results.save(make_result("demo", {}, [{"x_s": 1.0}]))
    assert (tmp_path / "results.sqlite").exists() and results.load(run_id).records[0]["x_s"] == 1.0


def test_references_are_labelled_with_their_source():
    names = results.reference_names()
    assert names, "at least one bundled reference"
    for name in names:
        ref = load_reference(name)
        assert ref.records, name
        assert all(r["tier"] == "reference" and r["source"] for r in ref.records), name
    with pytest.raises(KeyError, match="no reference named 'nope'"):
        load_reference("nope")
