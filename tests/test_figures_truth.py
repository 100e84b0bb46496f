"""What figures and notes say is true on this machine (issue 21, section 3): the hardware watch
draws its samples, a 1-core probe runs on 1 thread, load notes only on live numbers and never
with a share above the cores."""

from __future__ import annotations

import pytest

from hpclab import experiments


def test_hardware_watch_draws_every_sample_kind():
    from hpclab.profiling.watch import plot_watch

    res = experiments.run("hardware-watch", steps=10, interval=0.02, burn_seconds=0.0)
    samples = [r for r in res.records if r["kind"] == "sample"]
    assert {r["metric"] for r in samples} >= {"cpu", "rss"}
    fig = plot_watch(res)
    cores = [t for t in fig.data if t.name.startswith("core ")]
    rss = [t for t in fig.data if t.name == "RSS"]
    assert cores and all(len(t.y) > 0 for t in cores)
    assert len(rss) == 1 and len(rss[0].y) > 0 and min(rss[0].y) > 0  # MiB of a live process


@pytest.mark.parametrize("cores", [1, 0])
def test_the_gemm_probe_runs_on_the_cores_its_peak_counts(monkeypatch, cores):
    import torch

    from hpclab.compute import gemm
    from hpclab.measure.sysinfo import usable_cores
    from hpclab.welcome import plot_hardware

    seen = []
    real = gemm.time_gemm

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(gemm, "time_gemm", spy)
    before = torch.get_num_threads()
    res = experiments.run("hardware", cores=cores, probe_size=64)
    want = cores or usable_cores()
    assert seen == [want]  # the GEMM ran on as many threads as the bar has cores
    assert torch.get_num_threads() == before  # and the kernel's setting is back
    live = [r for r in res.records if r["tier"] == "live"]
    assert live[0]["threads"] == want
    name = next(t.name for t in plot_hardware(res).data if t.type == "scatter")
    assert f"on {want} thread" in name


def _model_only(config, progress):
    from hpclab.results import make_result

    return make_result("probe", config, [{"tier": "model", "peak_gflops": 1.0}])


def test_a_model_only_result_carries_no_load_note(monkeypatch):
    from hpclab.display import load_note
    from hpclab.experiments import Experiment, run_config
    from hpclab.measure import cpu_share
    from hpclab.welcome import HardwareConfig

    monkeypatch.setattr(cpu_share, "DISTURBED_CORES", -1.0)  # any measured run is disturbed
    monkeypatch.setattr(cpu_share, "WAITED_CORES", -1.0)
    monkeypatch.setattr(cpu_share, "MIN_WALL_S", 0.0)
    exp = Experiment(name="probe", chapter="00", help="", config=HardwareConfig, run=_model_only)
    res = run_config(exp, HardwareConfig.create())
    assert "cpu_share" not in res.env and load_note(res) == ""
    # A stored result from before (share attached to model rows) gets no note either.
    res.env["cpu_share"] = cpu_share.CpuShare(2, 1.0, 1.0, 1.0, None).to_dict()
    assert res.env["cpu_share"]["disturbed"] and load_note(res) == ""
    # The real chapter-00 panel without its probe is model only; a topology holds no speed.
    peaks = experiments.run("hardware", probe_size=0)
    assert "cpu_share" not in peaks.env
    assert "cpu_share" not in experiments.run("topology").env


def test_a_share_never_exceeds_the_cores(monkeypatch):
    from hpclab.measure import cpu_share

    # A few ticks of CPU time over a 5 ms run read as 3.8 cores of 2: never judged, never said.
    assert not cpu_share.CpuShare(2, 0.005, 3.8, 3.8, None).disturbed
    assert "3.8" not in cpu_share.CpuShare(2, 1.0, 3.8, 3.8, None).sentence()
    # Measured: counters that jump by more than the cores can do are clamped at the cores.
    ticks = iter([0.0, 50.0])
    monkeypatch.setattr(cpu_share, "_own_seconds", lambda descendants=False: next(ticks))
    with cpu_share.measure_cpu_share() as got:
        pass
    share = got.value
    assert share.own_cores == share.cores and 0 <= share.others_cores <= share.cores


def test_one_series_one_colour_in_every_subplot_and_whole_log_ticks():
    from hpclab.axes import tick_label
    from hpclab.parallel.strategies import plot_strategy_model

    fig = plot_strategy_model(experiments.run("strategy-model"))
    by_group: dict[str, set] = {}
    for t in fig.data:
        if t.legendgroup:
            by_group.setdefault(t.legendgroup, set()).add(t.line.color)
    assert len(by_group) == 4 and all(len(c) == 1 for c in by_group.values())
    assert len({next(iter(c)) for c in by_group.values()}) == 4  # and four different colours
    # The y axes (tokens/s, GB) are log: their ticks are whole labelled values, not "2" and "5".
    for axis in ("yaxis", "yaxis2"):
        spec = fig.layout[axis]
        assert spec.type == "log" and spec.tickmode == "array"
        assert len(spec.tickvals) >= 2
        assert list(spec.ticktext) == [tick_label(v) for v in spec.tickvals]


def test_log_ticks_read_as_numbers():
    from hpclab.axes import log_ticks, tick_label

    assert log_ticks(16, 1024) == [10, 20, 50, 100, 200, 500, 1000, 2000]
    assert log_ticks(1, 1e6) == [1, 10, 100, 1e3, 1e4, 1e5, 1e6]
    assert [tick_label(v) for v in (0.01, 5, 200, 1000, 1e4, 2e6, 3e9)] == [
        "0.01", "5", "200", "1000", "10k", "2M", "3G"
    ]  # fmt: skip


def test_result_tables_show_three_digits_and_whole_numbers():
    from hpclab.results import Result

    res = Result("x", {}, {}, [{"step_s": 0.106003, "bytes": 4194304.0, "name": "n" * 80}])
    frame = res.frame()
    assert frame["step_s"].iloc[0] == 0.106003  # the values stay what was measured ...
    text = frame.to_string()
    assert "0.106" in text and "0.106003" not in text  # ... and show three digits
    assert "4194304" in text and "4194304.0" not in text
    html = frame[["name"]]._repr_html_()  # selections stay readable; no cell cut at 50
    assert "n" * 80 in html


def test_the_leak_line_is_measured_and_a_hidden_leak_says_so():
    from hpclab.profiling.memory_tool import leak_per_step_bytes
    from hpclab.profiling.profile_experiment import _plot_rss

    # The tiny MLP's monitoring pass keeps its hidden activations [256, 128] and the log-softmax
    # [256, 10] in float32 per step (plus nll_loss's 4-byte total weight); parameters and the
    # batch are not the leak.
    assert leak_per_step_bytes(256) == 256 * (128 + 10) * 4 + 4
    assert leak_per_step_bytes(512) - leak_per_step_bytes(256) == 256 * (128 + 10) * 4
    rss = [{"seconds": t / 10, "rss_mib": 400 + (30 if t % 2 else 0)} for t in range(10)]
    fig = _plot_rss(rss, {"mib_per_s": 0.0, "leak_mib": 5.0}, "leak")
    assert list(fig.data[0].y)[:2] == [0, 30]  # growth since the first sample
    assert (
        list(fig.data[1].y) == [0, 5.0] and "less than RSS moves by itself" in fig.layout.title.text
    )
    big = _plot_rss(rss, {"mib_per_s": 0.0, "leak_mib": 500.0}, "leak")
    assert "less than" not in big.layout.title.text  # a leak that shows needs no excuse
    # with the steps marked, the set-up before them is not drawn, and both start at the first step
    marked = {"mib_per_s": 0.0, "leak_mib": 5.0, "steps_from_s": 0.25, "steps_to_s": 0.75}
    fig = _plot_rss(rss, marked, "leak")
    assert list(fig.data[0].x) == pytest.approx([0.05, 0.15, 0.25, 0.35, 0.45])
    assert list(fig.data[0].y) == [0, -30, 0, -30, 0] and list(fig.data[1].x)[0] == 0


def test_overlap_without_a_gpu_sizes_the_compute_and_says_what_was_modelled():
    from hpclab.topology.overlap import plot_overlap

    res = experiments.run("overlap", device="cpu", steps=2, batch_mib=1)
    part = next(r for r in res.records if r.get("op") == "compute" and r.get("record") == "part")
    assert part["n"] >= 32 and part["tier"] == "live"
    title = plot_overlap(res).layout.title.text
    assert "no GPU" in title and f"{part['n']}x{part['n']}" in title and "1 MiB at 12 GB/s" in title


def test_the_search_figure_says_what_ran():
    from hpclab.results import Result
    from hpclab.search.search_experiment import what_ran

    recs = [
        {"backend": "array", "seconds": s, "startup_s": 2.0, "worker": None} for s in (0.1, 0.3)
    ]
    res = Result("search", {"epochs": 1, "samples": 300}, {}, recs)
    line = what_ran(res)
    assert line.startswith("2 trials (1 epoch on 300 samples) on array: each computed 0.20 s")
    assert "took 2.00 s to start" in line


def test_every_trace_kind_survives_the_figure_decorator():
    import plotly.graph_objects as go

    from hpclab.display import figure

    traces = [
        go.Icicle(labels=["a", "b"], parents=["", "a"]),
        go.Sunburst(labels=["a", "b"], parents=["", "a"], name="s"),
        go.Heatmap(z=[[1, 2]], name="h"),
        go.Scatter(x=[1, 10, 100], y=[1, 2, 3], name="line"),
    ]
    for trace in traces:
        fig = figure(lambda result, t=trace: go.Figure(t))(None)
        assert len(fig.data) == 1


def test_the_title_and_its_notes_get_room_above_the_plot():
    import plotly.graph_objects as go

    from hpclab.display import note_on

    fig = go.Figure(go.Scatter(y=[1, 2]))
    fig.update_layout(
        title="a lesson<br><sup>why it does not show</sup><br><sup>and on a GPU</sup>"
    )
    note_on(fig, "you got 0.2 of 2 cores")
    assert fig.layout.margin.t >= 60 + 22 * 4  # four lines of title


def test_labels_of_lines_on_a_log_axis_sit_on_their_lines():
    # plotly reads a shape's x as the value but an annotation's as its log10 on a log axis: a
    # label given the value lands at 10^296 and squeezes the data into one corner
    import math

    from hpclab.ddp.large_batch_plot import plot_large_batch
    from hpclab.results import Result

    sweep = [
        {"role": "sweep", "variant": "linear", "global_batch": b, "steps_to_target": s,
         "reached": True, "lr": 0.1}
        for b, s in ((64, 114), (256, 41), (1024, 20))
    ]  # fmt: skip
    fit = {"role": "fit", "s_min": 20.2, "b_crit": 296.0, "b_simple": 255.0}
    fig = plot_large_batch(Result("large-batch", {"target_acc": 0.62}, {}, [*sweep, fit]))
    lines = sorted(shape.x0 for shape in fig.layout.shapes)
    labels = sorted(a.x for a in fig.layout.annotations if "B_" in a.text)
    assert lines == [255.0, 296.0]
    assert labels == pytest.approx([math.log10(255.0), math.log10(296.0)])
