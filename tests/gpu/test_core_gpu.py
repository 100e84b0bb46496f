"""The core's GPU paths: CUDA-event timing, NCCL launch, refusing to fork after CUDA init."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.gpu


def test_time_fn_uses_cuda_events_and_synchronises():
    from hpclab.measure.timing import time_fn

    a = torch.randn(4096, 4096, device="cuda")
    t = time_fn(lambda: a @ a, device="cuda", warmup=2, repeat=5)
    assert t.clock == "cuda_event"
    # 137 GFLOP per call: even an H100 needs > 0.1 ms; an unsynchronised timer reports ~10 us.
    assert t.median_s > 1e-4


def test_gemm_probe_on_gpu_is_checked():
    from hpclab.compute.gemm import time_gemm

    g = time_gemm(2048, "bf16", "cuda", repeat=5)
    assert g.gflops > 1000


def _nccl_rank(ctx):
    import torch.distributed as dist

    t = torch.ones(1, device=ctx.device) * (ctx.rank + 1)
    dist.all_reduce(t)
    return (ctx.backend, ctx.device, t.item())


def test_nccl_world_size_one():
    from hpclab.dist import launch

    assert launch(_nccl_rank, 1, backend="nccl", device="cuda") == [("nccl", "cuda:0", 1.0)]


def test_auto_places_ranks_on_gpus_when_each_gets_one():
    from hpclab.dist import launch, place

    n = torch.cuda.device_count()
    p = place(n)
    assert p.device == "cuda" and p.devices[-1] == f"cuda:{n - 1}"
    assert p.backend == ("nccl" if n > 1 else "none")
    assert place(n + 1).device == "cpu"  # one rank more than GPUs: CPU ranks, and said so
    assert "fewer than one per rank" in place(n + 1).note
    if n > 1:
        assert launch(_nccl_rank, n)[-1] == ("nccl", f"cuda:{n - 1}", n * (n + 1) / 2)


def test_inprocess_rank_on_the_gpu_tears_down_its_group():
    import torch.distributed as dist

    from hpclab.dist import launch

    for _ in range(2):  # the second run would fail if the first left its group behind
        got = launch(_nccl_rank, 1, backend="nccl", device="cuda", inprocess=True)
        assert got == [("nccl", "cuda:0", 1.0)] and not dist.is_initialized()


def test_fork_after_cuda_init_is_refused_with_a_clear_message():
    code = (
        "import torch\n"
        "torch.zeros(1, device='cuda')\n"
        "from hpclab.dist import launch, LaunchError\n"
        "def w(ctx):\n    return 1\n"
        "try:\n    launch(w, 1, start_method='fork')\n"
        "except LaunchError as e:\n    print('refused:', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "refused: cannot fork ranks: CUDA is already initialised" in out.stdout, out.stderr


def test_system_info_does_not_initialise_cuda():
    code = (
        "import torch\n"
        "from hpclab.measure.sysinfo import system_info\n"
        "info = system_info()\n"
        "assert info['gpus'], 'GPU not listed'\n"
        "from hpclab.compute import device as dev\n"
        "from hpclab.profiling.hardware import inventory\n"
        "from hpclab.doctor import run_checks\n"
        "assert dev.peak_gflops('cuda:0', 'bf16')[0] and 'cuda:0' in dev.gpu_sentence()\n"
        "assert dev.unsupported('cuda:0', 'bf16') is None and len(inventory()) > 1\n"
        "run_checks()\n"
        "assert not torch.cuda.is_initialized()\n"
        "print('ok', info['gpus'][0]['name'], info['gpus'][0]['peak_tflops'] is not None)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.startswith("ok"), out.stderr
