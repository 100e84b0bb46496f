"""What a student reads off a panel after pressing Run (issue 21, sections 1 and 3): log axes
with whole tick labels, bars from zero, each accumulated run its own labelled series, a title
that keeps its name under a load note, and controls that offer only what the config accepts."""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("ipywidgets")

from hpclab.widgets import panel  # noqa: E402
from hpclab.widgets.scaling_explorer import scaling_explorer  # noqa: E402

SUFFIX = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def _read(text: str) -> float:
    return float(text[:-1]) * SUFFIX[text[-1]] if text[-1] in SUFFIX else float(text)


def log_axes(fig) -> dict:
    layout = fig.layout.to_plotly_json()
    return {k: v for k, v in layout.items() if isinstance(v, dict) and v.get("type") == "log"}


def assert_whole_ticks(fig) -> None:
    """Every log axis labels its ticks with the value they stand at ("0.5", "200", "10k")."""
    axes = log_axes(fig)
    assert axes
    for name, spec in axes.items():
        assert spec.get("tickmode") == "array", name
        for value, text in zip(spec["tickvals"], spec["ticktext"], strict=True):
            assert _read(text) == pytest.approx(value), (name, value, text)


def lines(p) -> list:
    return [t for t in p.figure.data if t.type == "scatter" and t.showlegend is not False]


def test_gemm_runs_each_get_a_line_and_the_title_keeps_its_name(monkeypatch):
    monkeypatch.setenv("HPCLAB_QUICK", "1")
    p = panel("gemm", fields=("size", "dtype", "threads"), fixed={"references": False},
              accumulate=True, run_now=False)  # fmt: skip
    p.controls["dtype"].value, p.controls["threads"].value = "fp32", "1"
    for sizes in ("32,64", "64,96"):
        p.controls["size"].value = sizes
        p.start(wait=True)
    assert p.figure.layout.title.text.startswith("GEMM throughput")
    by_name = {t.name: list(t.x) for t in lines(p)}
    # both runs measured n=64: two labelled lines, not one line jumping at 64
    assert by_name == {"cpu fp32, 1 thread (size 32,64)": [32, 64],
                       "cpu fp32, 1 thread (size 64,96)": [64, 96]}  # fmt: skip
    bars = next(t for t in p.figure.data if t.type == "bar")
    assert sorted(bars.y) == sorted(by_name)
    assert_whole_ticks(p.figure)


def test_explorer_batch_sizes_are_separate_series_on_a_gpu_count_axis(monkeypatch):
    monkeypatch.setenv("HPCLAB_QUICK", "1")
    p = scaling_explorer(run_now=False)
    for batch in (32, 64):
        p.controls["batch_size"].value = batch
        p.start(wait=True)
        assert "done" in p.status.value, p.last_error
    live = {t.legendgroup for t in p.figure.data if "(live)" in (t.name or "")}
    model = p.controls["model"].value
    assert live == {f"{model}, weak, batch size 32 (live)", f"{model}, weak, batch size 64 (live)"}
    assert_whole_ticks(p.figure)
    ranks = p.figure.layout.xaxis
    assert list(ranks.ticktext) == ["1", "2"] and ranks.dtick is None


def test_storage_bars_start_at_zero_and_runs_differing_in_size_are_named(monkeypatch):
    monkeypatch.setenv("HPCLAB_QUICK", "1")
    p = panel("storage-read", fields=("format", "samples"), accumulate=True, run_now=False,
              fixed={"shape": (1, 4, 4), "cache": ("warm",), "order": ("random",)})  # fmt: skip
    p.controls["format"].value = "memmap"
    for samples in (50, 60):
        p.controls["samples"].value = samples
        p.start(wait=True)
    fig = p.figure
    assert fig.layout.yaxis.type == "linear" and fig.layout.yaxis.rangemode == "tozero"
    bars = {t.name: t for t in fig.data}
    assert set(bars) == {"warm, random (samples 50)", "warm, random (samples 60)"}
    for run, t in zip(p.results, bars.values(), strict=True):
        (rate,) = t.y
        assert rate == run.records[0]["samples_per_s"]
        assert _read(t.text[0]) == pytest.approx(rate, rel=5e-3)  # each bar says its value


def test_controls_offer_only_what_the_config_accepts(monkeypatch):
    monkeypatch.setenv("HPCLAB_QUICK", "1")
    hw = panel("hardware", fields=("cores", "probe_size"), run_now=False)
    sizes = [v for _label, v in hw.controls["probe_size"].options]
    assert sizes[0] == 0 and min(sizes[1:]) == 16 and max(sizes) == 8192
    assert hw.controls["probe_size"].value == hw.experiment.config.create().probe_size  # kept
    whatif = panel("scaling-model", fields=("workload", "max_gpus"), run_now=False)
    assert "custom" not in whatif.controls["workload"].options  # its hidden scaling is "preset"
    custom = panel("scaling-model", fields=("workload", "scaling"), fixed={"scaling": "weak"},
                   run_now=False)  # fmt: skip
    assert "custom" in custom.controls["workload"].options  # weak takes custom numbers


def test_counts_over_decades_get_a_log_slider_read_as_integers(monkeypatch):
    monkeypatch.setenv("HPCLAB_QUICK", "1")
    p = panel("storage-read", fields=("samples",), run_now=False)
    ctl = p.controls["samples"]
    assert ctl.base == 10 and 10**ctl.min == pytest.approx(10) and 10**ctl.max == pytest.approx(2e6)
    ctl.value = 125.89  # where a step of the slider lands
    assert p.config().samples == 126 and isinstance(p.config().samples, int)
    explorer = scaling_explorer(run_now=False)
    assert 2**0 < 10 ** explorer.controls["batch_size"].max == pytest.approx(2048)


def test_model_what_if_gpu_axis_is_written_out():
    from hpclab import experiments

    fig = experiments.get("scaling-model").plot(experiments.run("scaling-model", max_gpus=4096))
    for name in ("xaxis", "xaxis2"):
        axis = fig.layout[name]
        assert [_read(t) for t in axis.ticktext] == list(axis.tickvals)
        assert all(math.log2(v).is_integer() for v in axis.tickvals)
        assert axis.tickvals[-1] >= 4096


def test_chapter_00_says_how_to_revive_a_panel_after_a_restart():
    nb = json.load(open("notebooks/00_welcome.ipynb"))
    text = " ".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    text = " ".join(text.split())
    assert "model not found" in text and "re-run the cell to get a live panel" in text


def test_training_runs_with_other_step_counts_are_their_own_lines(monkeypatch):
    monkeypatch.setenv("HPCLAB_QUICK", "1")
    p = panel("train-throughput", fields=("batch_size", "steps"), accumulate=True, run_now=False,
              fixed={"references": False, "threads": (1,), "model": "tiny"})  # fmt: skip
    p.controls["batch_size"].value = "4,8"
    for steps in (2, 3):
        p.controls["steps"].value = steps
        p.start(wait=True)
        assert "done" in p.status.value, p.last_error
    assert p.figure.layout.title.text.startswith("Training throughput")
    left = {t.name: list(t.x) for t in p.figure.data if t.xaxis == "x"}
    assert left == {"cpu, 1 thread (steps 2)": [4, 8], "cpu, 1 thread (steps 3)": [4, 8]}
