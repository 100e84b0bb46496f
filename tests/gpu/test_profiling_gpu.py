"""Chapter 03's GPU paths: the patient on CUDA, torch.profiler's CUDA activity, nvidia-smi
sampling and the burn-in on each GPU."""

from __future__ import annotations

import pytest
import torch

from hpclab.profiling.patient import FAULTS, train

pytestmark = pytest.mark.gpu


def test_faults_keep_the_loss_on_cuda():
    healthy = train((), steps=30, device="cuda")
    for fault in FAULTS:
        run = train(fault, steps=30, device="cuda")
        assert run.final_loss == pytest.approx(healthy.final_loss, rel=1e-4), fault


def test_torch_profiler_records_cuda_kernels(tmp_path):
    from hpclab.profiling import torch_tool

    path = tmp_path / "trace.json"
    prof, run, error = torch_tool.profile_steps(
        lambda on_step: train("item-sync", steps=8, device="cuda", on_step=on_step, ranges=True),
        device="cuda",
        active=3,
        trace_path=path,
    )
    assert not error
    ops = torch_tool.op_table(prof, 50, device="cuda")
    assert sum(r["self_device_seconds"] for r in ops) > 0
    events, _ = torch_tool.trace_events(path)
    assert any(e.get("cat") == "kernel" for e in events)


def test_sampler_reads_nvidia_smi_and_burn_in_is_clean():
    from hpclab.profiling.hardware import Sampler, burn

    with Sampler(0.1) as s:
        train((), steps=100, device="cuda")
    assert not s.note and any(r["kind"] == "gpu" for r in s.records)
    for i in range(torch.cuda.device_count()):
        b = burn(f"cuda:{i}", seconds=1.0, n=2048)
        assert b["errors"] == 0 and b["gflops"] > 1000
