"""Every panel a chapter shows, driven as a student drives it: set a control, press the Run button
itself (``run_button.click()``), and check that the records and the figure's trace values belong to
the new setting; an invalid value is one line in the status and nothing runs; Run pressed twice
quickly ends with the second run's results (the first one's never shows); Cancel says so and the
panel works after. One case per panel of notebooks/*.ipynb, built as the notebook builds it (with
``run_now=False``, the first run being the click), on the quickest settings.

The glue itself, the data-wait monitor and the job monitor's Cancel: tests/test_runner.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

pytest.importorskip("ipywidgets")

from hpclab.widgets import panel  # noqa: E402
from hpclab.widgets.controls import set_max  # noqa: E402
from hpclab.widgets.scaling_explorer import (  # noqa: E402
    dp_by_hand_panel,
    scaling_explorer,
    time_to_accuracy_panel,
)

JOIN_S = 300  # generous: a loaded 2-core machine; a healthy run here takes seconds


def cfg(p, name: str) -> Any:
    """What the panel's controls say for ``name``, parsed as the config wants it."""
    return getattr(p.config(), name)


def traces(p, **match) -> list:
    return [t for t in p.figure.data if all(getattr(t, k) == v for k, v in match.items())]


def rows(p, **match) -> list[dict]:
    return [
        r for res in p.results for r in res.records if all(r.get(k) == v for k, v in match.items())
    ]


def beyond_max(name: str) -> Callable[[Any], str]:
    """An invalid value for a panel whose controls can only hold valid ones: the slider widened
    past the field's maximum (as a node with more cores than a field allows would widen ranks)."""

    def set_bad(p) -> str:
        (top,) = [f["max"] for f in p.experiment.config.describe() if f["name"] == name]
        ctl = p.controls[name]
        set_max(ctl, top + 1)
        ctl.value = top + 1
        return f"{name}={top + 1} is out of range"

    return set_bad


def offered(name: str, value: Any, expected: str) -> Callable[[Any], str]:
    """An invalid value for a dropdown that offers only valid ones: the option added back."""

    def set_bad(p) -> str:
        ctl = p.controls[name]
        ctl.options = [*ctl.options, (str(value), value)]
        ctl.value = value
        return expected

    return set_bad


def setting(**values: Any) -> Callable[[Any], str]:
    def set_bad(p) -> str:
        for k, v in values.items():
            p.controls[k].value = v
        return ""

    return set_bad


def typed(name: str, value: str, expected: str) -> Callable[[Any], str]:
    """An invalid value typed into a text control; the status must say ``expected``."""

    def set_bad(p) -> str:
        p.controls[name].value = value
        return expected

    return set_bad


@dataclass
class Case:
    build: Callable[[], Any]  # the notebook's call, run_now=False
    control: str  # the control the student moves
    values: tuple  # (cancelled, new, replaced, final): four settings of ``control``
    shows: Callable[[Any, Any], None]  # asserts records AND figure belong to a setting
    bad: Callable[[Any], str]  # sets an invalid value; returns the expected text
    cheap: dict = field(default_factory=dict)  # quickest settings of the other controls


# --- what "belongs to the setting" means, panel by panel ------------------------------------------
def shows_hardware(p, cores):
    (peak,) = [r for r in rows(p, tier="model") if r["dtype"] == "fp32"]
    assert peak["cores"] == cores
    (bar,) = traces(p, type="bar")
    assert bar.name.startswith(f"CPU peak, {cores} core")
    assert dict(zip(bar.x, bar.y, strict=True))["fp32"] == pytest.approx(peak["peak_gflops"])


def shows_x(key: str, kind: str = "scatter"):
    """Records carry ``key`` = the setting, and the first trace of ``kind`` plots them at x."""

    def check(p, value):
        (v,) = value if isinstance(value, tuple) else (value,)  # one value of a tuple field
        assert {r[key] for r in p.results[-1].records if key in r} == {v}
        xs = {x for t in traces(p, type=kind) for x in t.x}
        assert v in xs, f"{v} not among the plotted x values {sorted(xs, key=str)}"

    return check


def shows_lanes(p, gpus):
    (what_if,) = rows(p, table="budget", link="what-if")
    assert what_if["gpus"] == gpus
    (bars,) = traces(p, type="bar")
    plotted = dict(zip(bars.y, bars.x, strict=True))["what-if: per GPU"]
    assert plotted == pytest.approx(what_if["host_gbps_per_gpu"])


def shows_profile(p, tool):
    assert {r["tool"] for r in p.results[-1].records} == {tool}
    assert tool in p.figure.layout.title.text.lower()


def shows_sgd(who: str):
    def check(p, n):
        assert {r[who] for r in rows(p, kind="summary") if r.get(who) is not None} >= {n}
        names = [t.name or "" for t in p.figure.data]
        assert any(re.search(rf"\b{n}( |x|$)", name) for name in names), names

    return check


def shows_ddp(p, model):
    live = [r for r in p.results[-1].records if r["tier"] == "live"]
    assert live and {r["model"] for r in live} == {model}
    (thru, _eff) = traces(p, name=f"{model}, weak (live)")
    assert sorted(thru.x) == sorted(r["ranks"] for r in live)


def shows_algorithms(p, algorithms):
    """Each algorithm's measured times are its dots in the time panel, its model's fitted times
    the line beside them."""
    res = p.results[-1]
    live = [r for r in res.records if r["tier"] == "live"]
    assert {r["algorithm"] for r in live} == set(algorithms)
    ranks = f"{res.config['ranks']} ranks"
    for a in algorithms:
        mine = sorted((r for r in live if r["algorithm"] == a), key=lambda r: r["bytes"])
        impl = "dist.all_reduce" if a == "builtin" else f"{a} (send/recv)"
        _busbw, dots = traces(p, name=f"{impl}, {ranks} (live)")
        assert list(dots.x) == [r["bytes"] for r in mine]
        assert list(dots.y) == pytest.approx([r["time_s"] for r in mine])
        if a != "builtin":
            _busbw, line = traces(p, name=f"{a} model, {ranks} (model)")
            assert list(line.y) == pytest.approx([r["model_seconds"] for r in mine])


def shows_hang(p, bad):
    """Every run planted the fault on ``bad``; one bar per run, labelled with the rank it named,
    and the tool made for the fault names the planted rank."""
    recs = p.results[-1].records
    assert recs and {r["culprit"] for r in recs} == {bad}
    (bars,) = traces(p, type="bar")
    assert list(bars.y) == pytest.approx([r["seconds"] for r in recs])
    assert list(bars.text) == [
        f"named rank {r['named_rank']} ({'right' if r['found'] else 'wrong'})" for r in recs
    ]
    assert recs[1]["named_rank"] == bad  # monitored_barrier / TORCH_DISTRIBUTED_DEBUG=DETAIL


def shows_time_to_target(p, rule):
    (rec,) = [r for r in p.results[-1].records if r["tier"] == "live"]
    assert p.results[-1].config["lr_rule"] == rule and "steps_to_target" in rec
    plotted = {y for t in p.figure.data for y in t.y}
    assert rec["time_to_target_s"] in plotted or "never reached" in p.figure.layout.title.text


def shows_gpus_up_to(trace_name: str):
    def check(p, max_gpus):
        assert max(r["gpus"] for r in p.results[-1].records if r["tier"] == "model") == max_gpus
        assert max(traces(p, name=trace_name)[0].x) == max_gpus

    return check


def shows_dp(p, model):
    assert {r["model"] for r in p.results[-1].records} == {model}
    assert f"({model} model)" in p.figure.layout.title.text
    assert len(traces(p, type="bar")[0].x) == len(p.results[-1].records)  # one bar per impl


def shows_pipeline(p, micro):
    gpipe = [r for r in rows(p, kind="schedule") if r["schedule"] == "gpipe"]
    assert {r["micro_batches"] for r in gpipe} == {micro}
    stages = gpipe[0]["stages"]
    # one forward bar per stage and micro-batch in the busiest schedule's Gantt
    assert max(len(t.y) for t in traces(p, type="bar", name="forward")) == stages * micro


def shows_search(p, trials):
    assert len([r for r in p.results[-1].records if "trial" in r]) == trials
    (best,) = [t for t in p.figure.data if t.type == "scatter"]
    assert list(best.x) == list(range(1, trials + 1))


def shows_fsdp(p, depth):
    res = p.results[-1]
    assert res.config["depth"] == depth
    names = [r["strategy"] for r in res.records]
    assert list(traces(p, name="state (live)")[0].x) == names  # one bar per strategy


def shows_plan(p, gpus):
    assert p.results[-1].config["gpus"] == gpus
    assert f"on {gpus} x " in p.figure.layout.title.text
    assert len(traces(p, name="capacity")[0].x) == 5  # one bar per ZeRO stage, and HSDP's


def shows_compile(p, batch):
    res = p.results[-1]
    live = [r for r in res.records if r["tier"] == "live"]
    assert res.config["batch_size"] == batch and {r["mode"] for r in live} == {"eager", "default"}
    for r in live:  # each mode's throughput is this batch over its own step time
        assert r["samples_per_s"] == pytest.approx(batch / r["step_s"])
    step = traces(p, name="step (ms), bars to the quartiles")[0]
    assert list(step.y) == pytest.approx([1e3 * r["step_s"] for r in live])


def shows_knobs(p, epochs):
    assert p.results[-1].config["epochs"] == epochs
    for persistent in (False, True):
        (line,) = traces(p, name=f"persistent_workers={persistent}")
        assert list(line.x) == list(range(1, epochs + 1))  # one first batch per epoch


GEMM_FIELDS = ("size", "dtype", "threads", "compare_devices", "device")  # chapter 01's first panel

CASES = {
    "hardware": Case(
        lambda: panel("hardware", fields=("cores", "probe_size"), live=True, run_now=False),
        "cores", (4, 1, 8, 2), shows_hardware,
        offered("probe_size", 8, "probe_size=8 is too small"), cheap={"probe_size": 0},
    ),
    "gemm": Case(
        lambda: panel("gemm", fields=GEMM_FIELDS, fixed={"references": False}, accumulate=True,
                      run_now=False),
        "size", ("40", "48", "56", "32"), shows_x("size"),
        setting(size="48,x"), cheap={"dtype": "fp32", "threads": "1"},
    ),
    "train-throughput": Case(
        lambda: panel("train-throughput", fields=("batch_size", "threads", "compare_devices",
                      "device", "model"), fixed={"references": False}, accumulate=True,
                      run_now=False),
        "batch_size", ("4", "8", "12", "16"), shows_x("batch_size"),
        setting(batch_size=""), cheap={"threads": "1", "model": "tiny"},
    ),
    "compile": Case(
        lambda: panel("compile", fields=("batch_size", "steps", "graph_break", "model"),
                      run_now=False),
        "batch_size", (16, 8, 24, 32), shows_compile, beyond_max("steps"), cheap={"steps": 2},
    ),
    "loader-knobs": Case(
        lambda: panel("loader-knobs", fields=("epochs", "workers", "prefetch_factor",
                      "open_latency_ms"), run_now=False),
        "epochs", (3, 2, 4, 3), shows_knobs, setting(prefetch_factor="1,x"),
        cheap={"workers": 1, "prefetch_factor": "2"},
    ),
    "lanes": Case(
        lambda: panel("lanes", fields=("gen", "width", "gpus", "cpu_lanes", "sockets",
                      "gpus_per_switch"), live=True, run_now=False),
        "gpus", (3, 4, 5, 6), shows_lanes, beyond_max("gpus"),
    ),
    "profile": Case(
        lambda: panel("profile", fields=("fault", "tool", "steps"), run_now=False),
        "tool", ("line", "tracemalloc", "line", "cprofile"), shows_profile,
        setting(fault="nonsense"), cheap={"steps": 5, "fault": "slow-data"},
    ),
    "storage-read": Case(
        lambda: panel("storage-read", fields=("format", "shape", "cache", "order", "samples"),
                      accumulate=True, run_now=False),
        "format", ("hdf5", "memmap", "files-npy", "lmdb"), shows_x("format", "bar"),
        setting(format="lmdb,zip"),
        cheap={"samples": 50, "shape": "1,4,4", "cache": "warm", "order": "random"},
    ),
    "hogwild": Case(
        lambda: panel("hogwild", fields=("workers", "threads", "model", "locking", "lr", "nnz",
                      "updates"), accumulate=True, run_now=False),
        "workers", (3, 1, 4, 2), shows_sgd("workers"),
        setting(workers=64, threads=64), cheap={"updates": 40},
    ),
    "paramserver": Case(
        lambda: panel("paramserver", fields=("trainers", "servers", "mode", "model", "lr",
                      "bound", "steps"), accumulate=True, run_now=False),
        "trainers", (3, 1, 4, 2), shows_sgd("trainers"), beyond_max("trainers"),
        cheap={"steps": 10},
    ),
    "ddp explorer": Case(
        lambda: scaling_explorer(run_now=False),
        "model", ("cnn", "deep", "large", "tiny"), shows_ddp,
        setting(scaling="strong", batch_size=33),
    ),
    "ddp time to accuracy": Case(
        lambda: time_to_accuracy_panel(run_now=False),
        "lr_rule", ("sqrt", "linear", "none", "linear"), shows_time_to_target,
        setting(warmup_epochs=5.0), cheap={"ranks": 1},
    ),
    "allreduce algorithms": Case(
        lambda: panel("allreduce", fields=("algorithm", "ranks", "min_bytes", "max_bytes"),
                      fixed={"algorithm": ("builtin", "ring", "tree", "doubling"),
                             "min_bytes": 1024, "max_bytes": 4 * 2**20}, run_now=False),
        "algorithm", ("ring", "tree", "doubling", "ring,doubling"), shows_algorithms,
        typed("algorithm", "ring,butterfly", "is not allowed; allowed: one of builtin, ring"),
        cheap={"min_bytes": 1024, "max_bytes": 16384},
    ),
    "hang": Case(
        lambda: panel("hang", fields=("fault", "ranks", "bad_rank", "timeout_s"), run_now=False),
        "bad_rank", (0, 2, 1, 2), shows_hang, setting(bad_rank=5),
        cheap={"fault": "shape", "ranks": 3, "timeout_s": 1.0},
    ),
    "scaling-model": Case(
        lambda: panel("scaling-model", fields=("workload", "link", "network", "gpus_per_node",
                      "overlap", "max_gpus"), live=True, run_now=False),
        "max_gpus", (8, 16, 32, 4), shows_gpus_up_to("model"), beyond_max("gpus_per_node"),
    ),
    "dp-by-hand": Case(
        lambda: dp_by_hand_panel(run_now=False),
        "model", ("large", "tiny", "large", "deep"), shows_dp, beyond_max("ranks"),
        cheap={"batch_size": 16},
    ),
    "pipeline": Case(
        lambda: panel("pipeline", fields=("stages", "micro_batches", "batch_size"), run_now=False),
        "micro_batches", (8, 2, 16, 4), shows_pipeline,
        setting(batch_size=33), cheap={"batch_size": 32},
    ),
    "strategy-model": Case(
        lambda: panel("strategy-model", fields=("blocks", "width", "gpus_per_node", "link",
                      "network", "gpu_memory_gb", "max_gpus"), live=True, run_now=False),
        "max_gpus", (8, 64, 32, 16), shows_gpus_up_to("data"), beyond_max("blocks"),
    ),
    "search": Case(
        lambda: panel("search", fields=("backend", "where", "strategy", "trials", "workers",
                      "throttle", "per_task", "epochs"), run_now=False),
        "trials", (3, 2, 4, 1), shows_search, setting(per_task=3), cheap={"epochs": 1},
    ),
    "fsdp": Case(
        lambda: panel("fsdp", fields=("ranks", "width", "depth", "batch_size", "strategy"),
                      run_now=False),
        "depth", (4, 2, 5, 3), shows_fsdp, setting(strategy="ddp,zero4"),
        cheap={"width": 16, "batch_size": 8, "strategy": "ddp,zero3"},
    ),
    "zero-plan": Case(
        lambda: panel("zero-plan", fields=("params_b", "gpus", "stage", "precision",
                      "checkpointing", "micro_batch", "device", "gpus_per_node"), live=True,
                      run_now=False),
        "gpus", (8, 64, 16, 32), shows_plan, beyond_max("stage"),
    ),
}  # fmt: skip


def _settle(p) -> None:
    """Wait for the run the last click started (and any run it waits for)."""
    thread = p._thread
    if thread is not None:
        thread.join(JOIN_S)
        assert not thread.is_alive(), f"run still going after {JOIN_S} s: {p.status.value}"


def _ran(p, name: str, value: Any) -> bool:
    """Did a run with ``name=value`` leave results?"""
    norm = lambda v: tuple(v) if isinstance(v, list) else v  # noqa: E731 - JSON lists
    return any(norm(res.config[name]) == norm(value) for res in p.results)


@pytest.mark.parametrize("name", list(CASES))
def test_the_run_button_runs_what_the_controls_say(name, monkeypatch):
    monkeypatch.setenv("HPCLAB_QUICK", "1")
    case = CASES[name]
    cancelled, new, replaced, final = case.values
    p = case.build()
    for k, v in case.cheap.items():
        p.controls[k].value = v
    _settle(p)

    # Cancel, pressed at once: the run says so, shows nothing, and the panel works after.
    p.controls[case.control].value = cancelled
    parsed_cancelled = cfg(p, case.control)
    p.run_button.click()
    p.cancel_button.click()
    _settle(p)
    assert "cancelled" in p.status.value, p.status.value
    assert not _ran(p, case.control, parsed_cancelled)
    assert not p.run_button.disabled and p.cancel_button.disabled

    # A new value, then the button: the records and the plotted values are the new setting's.
    p.controls[case.control].value = new
    p.run_button.click()
    _settle(p)
    assert "done" in p.status.value, f"{p.status.value}\n{p.last_error}"
    case.shows(p, cfg(p, case.control))

    # An invalid value: one line that names it, and nothing runs.
    results, figure, thread = p.results, p.figure, p._thread
    saved = {k: c.value for k, c in p.controls.items()}
    expected = case.bad(p)
    p.run_button.click()
    status = p.status.value
    assert "error" in status and expected in status, status
    assert "<br>" not in status and "Traceback" not in status
    assert p._thread is thread and p.results == results and p.figure is figure  # nothing ran
    for k, v in saved.items():  # valid values again
        p.controls[k].value = v
    _settle(p)

    # Run pressed twice quickly: the newer run wins, the first one's result never shows.
    p.controls[case.control].value = replaced
    parsed_replaced = cfg(p, case.control)
    p.run_button.click()
    p.controls[case.control].value = final
    p.run_button.click()
    _settle(p)
    assert "done" in p.status.value, f"{p.status.value}\n{p.last_error}"
    case.shows(p, cfg(p, case.control))
    assert not _ran(p, case.control, parsed_replaced)


def test_comparing_devices_is_a_checkbox_beside_the_device_dropdown():
    """Chapter 01: "compare devices" is its own checkbox, not a device. Ticked (the default) the
    device dropdown is greyed out and reads auto, and a run measures the CPU and every GPU;
    unticked, the device picked runs alone. No GPU here: both give CPU rows only."""
    from hpclab.compute.device import gpu_count

    p = panel("gemm", fields=GEMM_FIELDS, fixed={"references": False}, accumulate=True,
              run_now=False)  # fmt: skip
    compare, device = p.controls["compare_devices"], p.controls["device"]
    assert type(compare).__name__ == "Checkbox" and compare.description == "compare devices"
    assert list(device.options) == ["auto", "cpu", "cuda"]  # no "all" among the devices
    assert compare.value and device.disabled and device.value == "auto"
    for k, v in {"size": "32", "dtype": "fp32", "threads": "1"}.items():
        p.controls[k].value = v

    compare.value = False
    assert not device.disabled
    device.value = "cpu"
    p.run_button.click()
    _settle(p)
    assert "done" in p.status.value, f"{p.status.value}\n{p.last_error}"
    assert {r["device"] for r in rows(p, tier="live")} == {"cpu"}
    assert p.results[-1].config["compare_devices"] is False

    compare.value = True  # back to comparing: the device reads auto again, greyed out
    assert device.disabled and device.value == "auto"
    p.run_button.click()
    _settle(p)
    assert "done" in p.status.value, f"{p.status.value}\n{p.last_error}"
    last = p.results[-1]
    assert last.config["compare_devices"] is True and last.config["device"] == "auto"
    gpus = {f"cuda:{i}" for i in range(gpu_count())}
    assert {r["device"] for r in last.records if r["tier"] == "live"} == {"cpu"} | gpus
