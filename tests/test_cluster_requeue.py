"""Chapter 07: checkpoints that survive kill -9, and a real requeue through Slurm."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import torch

from hpclab.cluster.checkpoint import checkpoints, load_latest, save_checkpoint
from hpclab.cluster.requeue import RequeueConfig, run_requeue
from hpclab.cluster.resumable import Trainer, train_uninterrupted
from hpclab.progress import Progress

WRITER = """
import sys, torch
from hpclab.cluster.checkpoint import save_checkpoint
print("writing", flush=True)
save_checkpoint(sys.argv[1], 2, {"step": 2, "big": torch.zeros(150_000_000, dtype=torch.uint8)})
"""


def test_kill_9_during_the_write_leaves_the_previous_checkpoint_loadable(tmp_path, no_orphans):
    save_checkpoint(tmp_path, 1, {"step": 1, "w": torch.ones(3)})
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "writing"
        tmp = tmp_path / "ckpt-00000002.pt.tmp"
        deadline = time.monotonic() + 60
        while not (tmp.exists() and tmp.stat().st_size > 0) and time.monotonic() < deadline:
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    state, path, refused = load_latest(tmp_path)
    assert path.name == "ckpt-00000001.pt" and state["step"] == 1 and refused == []
    assert [p.name for p in checkpoints(tmp_path)] == ["ckpt-00000001.pt"]


def test_a_corrupt_checkpoint_is_refused_by_name_and_the_previous_one_used(tmp_path):
    save_checkpoint(tmp_path, 1, {"step": 1})
    save_checkpoint(tmp_path, 2, {"step": 2})
    newest = tmp_path / "ckpt-00000002.pt"
    newest.write_bytes(newest.read_bytes()[:40])
    state, path, refused = load_latest(tmp_path)
    assert state["step"] == 1 and path.name == "ckpt-00000001.pt"
    assert len(refused) == 1 and refused[0].startswith("ckpt-00000002.pt: unreadable")


def test_resume_needs_the_rng_state_to_match_the_uninterrupted_run():
    a = Trainer(0)
    for _ in range(5):
        a.train_one()
    saved = a.state()
    b = Trainer(0)
    b.restore({**saved, "rng": torch.Generator().manual_seed(123).get_state()})
    a.restore(saved)
    for t in (a, b):
        while t.step < 12:
            t.train_one()
    ref = train_uninterrupted(12, 0)
    assert torch.allclose(a.flat(), ref, atol=1e-6)
    assert not torch.allclose(b.flat(), ref, atol=1e-6)  # without the RNG state it differs


def test_usr2_checkpoints_requeues_and_resumes_to_the_same_weights(cluster):
    config = RequeueConfig(trigger="signal", steps=24, step_delay_s=0.05, after_steps=6)
    result = run_requeue(config, Progress())
    summary = result.records[0]
    assert summary["requeues"] == 1 and summary["attempts"] == 2
    assert summary["final_params_max_diff"] <= 1e-6
    assert summary["checkpoint_mb_per_s"] > 0 and summary["requeue_gap_s"] > 0
    losses = [r for r in result.records if r["kind"] == "loss"]
    assert [r["step"] for r in losses] == list(range(24))
    first_after = min(r["step"] for r in losses if r["attempt"] == 1)
    assert 6 <= first_after < 24  # the second attempt began where the checkpoint left off
