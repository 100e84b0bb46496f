"""Chapter 03's torch.compile on a GPU: fusion (fewer kernels) and CUDA graphs (one launch)."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu


def _kernels(fn, *args) -> list[str]:
    """Names of the CUDA kernels one call of ``fn(*args)`` launches (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    fn(*args)  # warm: compiled code and caches ready
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def _chain(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(torch.relu(x * 2.0 + 1.0)) - 0.5  # 5 element-wise operators


def test_inductor_fuses_an_elementwise_chain_into_one_kernel():
    from hpclab.profiling.compile_experiment import one_compile_thread

    x = torch.randn(1 << 20, device="cuda")
    with one_compile_thread():
        fused = torch.compile(_chain)
        assert torch.allclose(fused(x), _chain(x), atol=1e-6)
        eager_kernels, fused_kernels = _kernels(_chain, x), _kernels(fused, x)
    torch._dynamo.reset()
    assert len(eager_kernels) >= 4  # one per operator
    assert len(fused_kernels) == 1 and "triton" in fused_kernels[0]


def test_reduce_overhead_replays_a_cuda_graph():
    from torch.profiler import ProfilerActivity, profile

    from hpclab.profiling.compile_experiment import one_compile_thread

    net = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    net = net.cuda().eval()
    x = torch.randn(32, 256, device="cuda")
    with one_compile_thread(), torch.no_grad():
        graphed = torch.compile(net, mode="reduce-overhead")
        for _ in range(3):  # record, then replay
            out = graphed(x)
        torch.cuda.synchronize()
        assert torch.allclose(out, net(x), atol=1e-4)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            graphed(x)
            torch.cuda.synchronize()
    torch._dynamo.reset()
    assert any("cudaGraphLaunch" in e.name for e in prof.events())


def test_compile_experiment_on_the_gpu_matches_eager_and_times_both_modes():
    from hpclab import experiments

    res = experiments.run(
        "compile", device="cuda", model="large", batch_size=256, steps=10,
        modes=("default", "reduce-overhead"), references=False,
    )  # fmt: skip
    modes = {r["mode"]: r for r in res.records}
    assert set(modes) == {"eager", "default", "reduce-overhead"}
    assert all(r["device"].startswith("cuda") and r["step_s"] > 0 for r in res.records)
    assert modes["default"]["compile_s"] > 0 and modes["eager"]["speedup"] == 1.0
