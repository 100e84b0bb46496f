"""The training engine's one entry point, hpclab.train.run_spec, and the core's layering."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from hpclab.dist import LaunchTimeout, launch
from hpclab.train import TrainSpec, ddp_worker, run_spec, samples_for

ROOT = Path(__file__).resolve().parents[1]

# 512 samples of 8x8, 16 per rank: small and quick, and two epochs' worth of steps on 2 ranks.
SPEC = TrainSpec(
    model="tiny", side=8, per_rank_batch=16, steps=18, warmup=2, lr=0.1, samples=512,
    measure_compute=False, measure_allreduce=False, return_params=True,
)  # fmt: skip


# forked ranks start with the engine's lazy imports done (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("preloaded")


@pytest.mark.parametrize("ranks", [1, 2])
def test_run_spec_trains_the_same_weights_as_the_direct_launch(ranks):
    ours = run_spec(SPEC, ranks, device="cpu", threads=1)
    direct = launch(ddp_worker, ranks, args=(SPEC,), device="cpu", threads_per_rank=1)
    assert [o["rank"] for o in ours] == list(range(ranks))
    for mine, theirs in zip(ours, direct, strict=True):
        assert torch.equal(mine["flat_params"], theirs["flat_params"])
        assert mine["loss_last"] == theirs["loss_last"]
    assert ours[0]["loss_last"] < ours[0]["loss_first"]  # it trained


def _sleepy(ctx, spec, seconds):
    time.sleep(seconds)
    return spec.steps


def test_run_spec_passes_the_spec_and_args_to_any_worker_and_keeps_the_deadline():
    assert run_spec(SPEC, 2, worker=_sleepy, args=(0.0,), device="cpu") == [18, 18]
    t0 = time.monotonic()
    with pytest.raises(LaunchTimeout, match="deadline_s=1"):
        run_spec(SPEC, 1, worker=_sleepy, args=(60.0,), device="cpu", deadline=1.0)
    assert time.monotonic() - t0 < 30  # stopped at the deadline, not after the minute


def test_run_spec_pins_each_rank_to_its_share_of_the_cpus():
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cores) < 2:
        pytest.skip("needs two usable cores")
    cpus = tuple(cores[-2:])
    outs = run_spec(SPEC, 2, device="cpu", threads=1, cpus=cpus)
    assert [o["cpus"] for o in outs] == [[cpus[0]], [cpus[1]]]


def test_a_spec_that_cannot_feed_the_ranks_is_refused_before_launching():
    small = TrainSpec(per_rank_batch=16, samples=24)
    with pytest.raises(ValueError, match="samples=24 gives each of 2 ranks 12 samples"):
        run_spec(small, 2, device="cpu")


def test_one_sizing_rule_and_clear_messages_for_bad_fields():
    assert samples_for(128) == 4096  # the floor
    assert samples_for(8192) == 16384  # two global batches
    assert TrainSpec.sized(4, per_rank_batch=2048).samples == 16384
    assert TrainSpec.sized(4, per_rank_batch=8, samples=100).samples == 100  # explicit wins
    with pytest.raises(ValueError, match="memory_format='nhwc' is not known; allowed: contig"):
        TrainSpec(memory_format="nhwc")
    with pytest.raises(ValueError, match="per_rank_batch=0; allowed: a whole number >= 1"):
        TrainSpec(per_rank_batch=0)


def _hpclab_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return {n for n in names if n == "hpclab" or n.startswith("hpclab.")}


def test_the_engine_imports_only_the_core_below_it():
    allowed = ("hpclab.train", "hpclab.dist", "hpclab.measure", "hpclab.results",
               "hpclab.config", "hpclab.progress")  # fmt: skip
    for path in sorted((ROOT / "hpclab" / "train").glob("*.py")):
        bad = {m for m in _hpclab_imports(path) if not m.startswith(allowed)}
        assert not bad, f"{path.name} imports {bad}"
    code = "import sys, hpclab.train; print(sorted(m for m in sys.modules if m.startswith(" \
        "('hpclab.ddp', 'hpclab.parallel', 'hpclab.search', 'hpclab.sgd', 'hpclab.cluster'))))"  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_no_module_outside_ddp_takes_the_engine_from_ddp_and_preload_stays_in_the_engine():
    # what chapter 06 teaches (cost models, the serial reference) may be imported; the engine not
    taught = {
        "hpclab.ddp",
        "hpclab.ddp.cost_model",
        "hpclab.ddp.collective_model",
        "hpclab.ddp.serial_loop",
        "hpclab.ddp.fabric",
    }
    for path in sorted((ROOT / "hpclab").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(("hpclab/ddp/", "hpclab/train/")):
            continue
        from_ddp = {m for m in _hpclab_imports(path) if m.startswith("hpclab.ddp")}
        assert from_ddp <= taught, f"{rel} imports {from_ddp - taught}"
        calls = [
            n for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", "")) == "preload"
        ]  # fmt: skip
        assert not calls, f"{rel} calls preload(): launch through hpclab.train.run_spec instead"
    assert not (ROOT / "hpclab" / "ddp" / "worker.py").exists()


def test_the_registry_builds_the_deep_model_at_any_depth_and_width():
    from hpclab.train import make_model

    net = make_model("deep", 256, 10, depth=4, width=32)
    linears = [m for m in net if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [
        (256, 32),
        (32, 32),
        (32, 32),
        (32, 10),
    ]
    assert str(make_model("deep", 64)) == str(make_model("deep", 64, depth=24, width=256))
    with pytest.raises(ValueError, match="model='tiny' has a fixed shape; depth and width apply"):
        make_model("tiny", 64, depth=3)
