"""Plots and numbers that tell the truth: roofline points under their roof (or the reason on the
plot), crossover axes on the data, stable colours, readable tables, the CPU share of a run."""

from __future__ import annotations

import math
import subprocess
import sys

import psutil
import pytest

from hpclab import experiments
from hpclab.display import number, plural, readable, series_color
from hpclab.results import Result


def test_roofline_roof_is_measured_like_its_points():
    res = experiments.run(
        "roofline", gemm_sizes=(16, 256), elements=2**22, conv_batch=1, repeat=3, threads=0
    )
    roof = next(r for r in res.records if r["kind"] == "roof" and r["tier"] == "live")
    assert roof["elements"] >= 2**22 and roof["gbps"] >= roof["gbps_median"]
    pts = [r for r in res.records if r["kind"] == "point" and r["tier"] == "live"]
    for p in pts:
        assert p["attainable_gflops"] == pytest.approx(
            min(p["attainable_gflops"], roof["gbps"] * p["intensity"]), rel=1e-9
        )
        over = p["gflops"] > 1.05 * p["attainable_gflops"]
        assert over == bool(p["note"]), p  # above the roof <=> a reason is given


def _roofline_with(add_gflops: float, cache_bytes: int | None):
    from hpclab.compute.roofline import above_roof_note

    point = {
        "kind": "point", "tier": "live", "op": "add", "label": "add", "intensity": 1 / 12,
        "gflops": add_gflops, "attainable_gflops": 10 / 12, "working_set_bytes": 3 * 4 * 2**22,
        "device": "cpu",
    }  # fmt: skip
    point["note"] = above_roof_note(point, cache_bytes)
    roofs = [
        {"kind": "roof", "tier": "live", "roof": "memory", "gbps": 10.0, "device": "cpu"},
        {"kind": "roof", "tier": "model", "roof": "compute", "peak_gflops": 500.0, "device": "cpu"},
    ]
    return Result("roofline", {}, {}, roofs + [point])


def test_a_point_above_its_roof_carries_the_reason_on_the_plot():
    plot = experiments.get("roofline").plot
    under = plot(_roofline_with(0.5, None))
    assert not under.layout.annotations
    busy = _roofline_with(3.0, None)
    assert "busier while the roof was measured" in busy.records[-1]["note"]
    fig = plot(busy)
    texts = " ".join(a.text for a in fig.layout.annotations)
    assert "busier while the roof" in texts.replace("<br>", " ")
    marked = [t for t in fig.data if t.name and "above its roof" in t.name]
    assert marked and marked[0].y[0] == 3.0
    cached = _roofline_with(3.0, 2**30)
    assert "fit in the 1024 MiB cache" in cached.records[-1]["note"]


def test_crossover_axis_stays_on_the_data(small_crossover):
    res = small_crossover
    cross = [r for r in res.records if r["kind"] == "crossover"]
    cross[0]["predicted_size"] = 1e105  # what an unlucky fit predicted
    fig = experiments.get("crossover").plot(res)
    for axis in (fig.layout.xaxis, fig.layout.xaxis2):
        lo, hi = axis.range
        assert hi <= math.log10(65536) + 0.2 and lo >= math.log10(8) - 0.2
    assert any("beyond the sizes measured" in a.text for a in fig.layout.annotations)


def test_one_colour_per_series_in_every_subplot_and_run():
    res = experiments.run(
        "ops", device="cpu", compare_devices=False, elements=2**12, batch=1, repeat=1, threads=1
    )
    fig = experiments.get("ops").plot(res)
    by_name: dict[str, set] = {}
    for t in fig.data:
        key = t.legendgroup or t.name
        by_name.setdefault(key, set()).add(t.marker.color)
    assert all(len(c) == 1 for c in by_name.values()), by_name
    first = {k: series_color(k) for k in ("run A", "run B")}
    series_color("run C")  # a run added later never recolours the earlier ones
    assert {k: series_color(k) for k in first} == first and first["run A"] != first["run B"]


def test_tables_show_counts_as_integers_and_three_significant_digits():
    import pandas as pd

    df = readable(
        pd.DataFrame(
            {"workers": [0.0, 2.0], "samples_per_s": [20498.674094, 1234.5], "loss": [0.1234, 0.5]}
        )
    )
    text = df.to_string()
    assert "0.0" not in text.split("\n")[1].split()[1]  # workers 0, not 0.0
    assert "20499" in text and "20498.674094" not in text and "0.123" in text
    assert plural(1, "thread") == "1 thread" and plural(2, "thread") == "2 threads"
    # a value that rounds up to the next power of ten keeps three digits, not four
    assert [number(v) for v in (9.99999, 0.0099999, 99.96, 1.234)] == [
        "10.0",
        "0.0100",
        "100",
        "1.23",
    ]


def test_cpu_share_sees_other_processes_in_our_way():
    import os
    import time

    from hpclab.measure.cpu_share import DISTURBED_CORES, WAITED_CORES, measure_cpu_share

    # As many busy processes as we have cores, and one busy thread of ours: we must wait.
    cores = len(os.sched_getaffinity(0))
    code = "import time\nt=time.time()\nwhile time.time()-t<2.5: pass"
    hogs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(cores)]
    try:
        time.sleep(0.3)  # the hogs are running
        with measure_cpu_share() as got:
            t = time.perf_counter()
            while time.perf_counter() - t < 1.0:
                pass
    finally:
        for h in hogs:
            h.wait(10)
    share = got.value
    # more runnable threads than cores: the hogs held our cores and we waited (how much depends
    # on the machine's load; that others ran at all and we waited at all does not)
    assert share.others_cores > 0
    assert share.waited_cores is not None and share.waited_cores > 0
    assert share.disturbed == (
        share.others_cores >= DISTURBED_CORES and share.waited_cores >= WAITED_CORES
    )
    assert ("other processes used" in share.sentence()) == share.disturbed


def test_cpu_share_others_busy_but_not_in_our_way_is_not_disturbed():
    from hpclab.measure.cpu_share import CpuShare

    # One thread of ours on two cores, another process on the other core, no wait: not disturbed.
    assert not CpuShare(2, 1.0, 1.0, 1.0, waited_cores=0.0).disturbed
    assert CpuShare(2, 1.0, 1.0, 1.0, waited_cores=0.5).disturbed
    # Work in child processes (their wait is unknown): others being busy is the signal alone.
    assert CpuShare(2, 1.0, 0.1, 1.0, waited_cores=None).disturbed
    assert not CpuShare(2, 1.0, 2.0, 0.1, waited_cores=0.5).disturbed  # we waited on ourselves


def test_doctor_report_wraps_at_spaces_only():
    from hpclab.doctor import REPORT_WIDTH, format_report, run_checks
    from hpclab.measure.sysinfo import system_info

    info = system_info()
    info["cpu_model"] = "A very long CPU model name " * 4 + "with 12345.678 GHz"
    text = format_report(run_checks(info), info)
    # A line is longer only when it is one unbreakable word (a long path) after its label.
    long = [ln for ln in text.splitlines() if len(ln) > REPORT_WIDTH]
    assert all(" " not in ln[28:].strip() for ln in long), long
    assert "12345.678" in text  # the number is whole on one line


def test_datasets_are_bounded_announced_and_cleaned(tmp_path, monkeypatch, capsys):
    from hpclab.storage import workspace

    monkeypatch.setenv("HPCLAB_DATA", str(tmp_path))
    monkeypatch.setenv("HPCLAB_DATA_MAX_MB", "0")  # keep only what is in use
    monkeypatch.setattr(workspace, "_in_use", set())
    first = workspace.prepared("files-npy", 64, (1, 8, 8))
    assert "datasets go to" in capsys.readouterr().err  # said once ...
    workspace._in_use.clear()  # the first dataset is no longer in use
    second = workspace.prepared("files-npy", 32, (1, 8, 8))
    assert "datasets go to" not in capsys.readouterr().err  # ... not twice
    assert second.is_dir() and not first.exists()  # the least recently used one went
    assert "freed" in workspace.clean() and workspace.usage_mb(tmp_path) == 0


def _experiment(run):
    from hpclab.experiments import Experiment
    from hpclab.welcome import HardwareConfig

    return Experiment(name="probe", chapter="00", help="", config=HardwareConfig, run=run)


def test_work_in_slurm_jobs_gets_no_cpu_share_and_no_disturbed_note(monkeypatch):
    from hpclab.display import load_note
    from hpclab.experiments import run_config
    from hpclab.measure import cpu_share
    from hpclab.results import make_result
    from hpclab.welcome import HardwareConfig

    monkeypatch.setattr(cpu_share, "DISTURBED_CORES", -1.0)  # any measured run is disturbed
    monkeypatch.setattr(cpu_share, "WAITED_CORES", -1.0)
    monkeypatch.setattr(cpu_share, "MIN_WALL_S", 0.0)  # and an instant run is judged
    cfg = HardwareConfig.create()
    here = run_config(_experiment(lambda c, p: make_result("probe", c, [{"x": 1}])), cfg)
    assert here.env["cpu_share"]["disturbed"] and load_note(here)
    jobs = run_config(
        _experiment(lambda c, p: make_result("probe", c, [{"x": 1}], ran_elsewhere=True)), cfg
    )
    assert "cpu_share" not in jobs.env and load_note(jobs) == ""


def test_a_live_child_working_for_the_run_counts_as_ours():
    import time

    from hpclab.experiments import run_config
    from hpclab.results import make_result
    from hpclab.welcome import HardwareConfig

    children, child_cpu_s = [], []

    def run(cfg, progress):
        code = "import time\nt=time.time()\nwhile time.time()-t<5: pass"
        children.append(subprocess.Popen([sys.executable, "-c", code]))  # a worker, say
        time.sleep(1.5)
        t = psutil.Process(children[0].pid).cpu_times()
        child_cpu_s.append(t.user + t.system)
        return make_result("probe", cfg, [{"x": 1}])  # the worker is still running

    try:
        res = run_config(_experiment(run), HardwareConfig.create())
    finally:
        for c in children:
            c.kill()
            c.wait(10)
    # the child's CPU seconds (however many it got on this machine) are counted as the run's
    share = res.env["cpu_share"]
    assert child_cpu_s[0] > 0
    assert share["own_cores"] * share["wall_s"] >= child_cpu_s[0] * 0.999


def test_a_category_axis_of_a_subplot_keeps_every_label():
    """A narrow subplot's numeric axis gets at most 6 ticks; a category axis keeps every name
    (with nticks, every other fix of chapter 03's waterfall lost its label)."""
    from plotly.subplots import make_subplots

    from hpclab.display import readable_layout

    fig = make_subplots(rows=1, cols=2)
    fig.add_bar(x=[f"fix {i}" for i in range(8)], y=list(range(8)), row=1, col=1)
    fig.add_scatter(x=list(range(100)), y=list(range(100)), row=1, col=2)
    readable_layout(fig)
    assert fig.layout.xaxis.nticks is None and fig.layout.xaxis2.nticks == 6
