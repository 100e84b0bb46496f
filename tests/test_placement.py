"""One placement decision for every experiment (hpclab.dist.place): devices, backend, threads.

Pure logic: the GPU and core counts are passed in, so the 1-, 2- and 4-GPU cases run here too.
"""

from __future__ import annotations

import os

import pytest
import torch

from hpclab.config import ConfigError
from hpclab.dist import LaunchError, place, torch_threads


@pytest.mark.parametrize(
    "ranks, gpus, device, backend, devices",
    [
        (1, 0, "cpu", "none", ("cpu",)),
        (2, 0, "cpu", "gloo", ("cpu", "cpu")),
        (1, 1, "cuda", "none", ("cuda:0",)),
        (2, 1, "cpu", "gloo", ("cpu", "cpu")),  # fewer GPUs than ranks: CPU ranks stand in
        (2, 2, "cuda", "nccl", ("cuda:0", "cuda:1")),
        (4, 2, "cpu", "gloo", ("cpu",) * 4),
        (2, 4, "cuda", "nccl", ("cuda:0", "cuda:1")),
        (4, 4, "cuda", "nccl", tuple(f"cuda:{i}" for i in range(4))),
    ],
)
def test_auto_means_one_gpu_per_rank_when_there_are_enough(ranks, gpus, device, backend, devices):
    p = place(ranks, "auto", gpus=gpus, cores=8)
    assert (p.device, p.backend, p.devices) == (device, backend, devices)
    assert p.threads == max(1, 8 // ranks)
    if device == "cpu" and gpus:
        assert f"{gpus} GPU(s) visible, fewer than one per rank" in p.note
    if device == "cuda":
        assert p.note.startswith(f"{ranks} rank") and f"of {gpus} GPU(s)" in p.note


@pytest.mark.parametrize("gpus", [0, 1, 2])
def test_cuda_refuses_fewer_gpus_than_ranks_in_one_line(gpus):
    with pytest.raises(LaunchError) as info:
        place(4, "cuda", gpus=gpus, cores=8)
    msg = str(info.value)
    assert msg.startswith("device='cuda' needs one GPU per rank: ranks=4 but ")
    assert (f"{gpus} GPU(s) are visible" if gpus else "no GPU is visible here") in msg
    assert (f"ranks 1..{gpus} on GPUs" in msg) == (gpus > 0)
    assert "device='auto' or 'cpu'" in msg and "\n" not in msg
    assert isinstance(info.value, ConfigError)  # the CLI says it in one line, exit 2
    assert place(4, "cuda", gpus=4, cores=8).devices[-1] == "cuda:3"


def test_cpu_is_cpu_even_with_gpus_and_oversubscription_has_one_limit():
    assert place(2, "cpu", gpus=4, cores=8).devices == ("cpu", "cpu")
    p = place(6, "cpu", gpus=0, cores=2)
    assert p.threads == 1 and "6 threads share 2 core(s)" in p.note
    with pytest.raises(
        LaunchError, match=r"ranks=9 CPU processes exceed 4 x the 2 usable .*1\.\.8"
    ):
        place(9, "auto", gpus=0, cores=2)
    assert place(9, "auto", gpus=9, cores=2).device == "cuda"  # GPUs are not cores


def test_backend_rules_and_bad_values():
    assert place(1, "cpu", "gloo", cores=2).backend == "gloo"  # a one-rank group, if asked
    assert place(3, "cpu", "none", cores=2).backend == "none"  # ranks sharing tensors
    assert place(2, "auto", "gloo", gpus=2, cores=2).device == "cpu"
    for kwargs, fragment in [
        ({"ranks": 2, "backend": "nccl", "device": "cpu"}, "backend='nccl' needs one GPU"),
        ({"ranks": 2, "backend": "mpi"}, "backend='mpi' is not allowed"),
        ({"ranks": 2, "device": "tpu"}, "device='tpu' is not allowed; allowed: auto, cpu, cuda"),
        ({"ranks": 0}, "ranks=0 must be a whole number"),
    ]:
        with pytest.raises(LaunchError, match=fragment):
            place(gpus=0, cores=2, **kwargs)
    assert place(2, threads=3, gpus=0, cores=2).threads == 3


def test_every_multi_rank_experiment_places_ranks_the_same_way(monkeypatch):
    """ddp refused 4 ranks on 2 GPUs while allreduce ran them on CPU: now both ask place()."""
    import hpclab.dist.placement as placement
    from hpclab import experiments

    monkeypatch.setattr(placement, "gpu_count", lambda: 2)
    launched = []

    def fake_launch(worker, ranks, **kwargs):
        launched.append((worker.__name__, ranks, kwargs.get("device", "auto")))
        raise KeyboardInterrupt  # stop before any work: only the decision is under test

    # all three launch through hpclab.train's local launch, which imports it when it runs
    monkeypatch.setattr("hpclab.dist.launch", fake_launch)
    for name in ("ddp", "allreduce", "ddp-buckets"):
        with pytest.raises(KeyboardInterrupt):
            experiments.run(name, ranks=4)
    assert [d for *_, d in launched] == ["cpu", "cpu", "cpu"], launched
    with pytest.raises(ConfigError, match="device='cuda' needs one GPU per rank: ranks=4"):
        experiments.run("ddp", ranks=4, device="cuda")
    with pytest.raises(ConfigError, match="device='cuda' needs one GPU per rank: ranks=4"):
        experiments.run("allreduce", ranks=4, device="cuda")


def test_one_process_device_uses_the_same_rule():
    from hpclab.compute import device as dev

    assert dev.resolve_devices("cpu") == ["cpu"]
    if dev.gpu_count() == 0:
        with pytest.raises(ConfigError, match="device='cuda' needs a GPU but no GPU is visible"):
            dev.resolve_devices("cuda")


def test_torch_threads_is_the_one_setter_and_restores():
    old, old_env = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    with torch_threads(1) as n:
        assert n == 1 and torch.get_num_threads() == 1 and os.environ["OMP_NUM_THREADS"] == "1"
    assert torch.get_num_threads() == old and os.environ.get("OMP_NUM_THREADS") == old_env


def _affinity(ctx):
    import torch.utils.data as tud

    # A DataLoader worker started by the rank runs on the rank's cores too: one item, its affinity.
    worker = tud.DataLoader(_AffinityOfWorker(), num_workers=1, batch_size=None)
    return sorted(os.sched_getaffinity(0)), ctx.cpus, ctx.threads, next(iter(worker))


class _AffinityOfWorker(torch.utils.data.IterableDataset):
    def __iter__(self):
        yield sorted(os.sched_getaffinity(0))


def test_cpus_split_into_one_disjoint_slice_per_rank_and_pin_each_rank():
    from hpclab.dist import launch
    from hpclab.dist.placement import rank_cores

    usable = sorted(os.sched_getaffinity(0))
    assert rank_cores([3, 1, 2, 0, 5], 2, set(range(8))) == (
        (0, 1),
        (2, 3),
    )  # sorted, consecutive, rest unused
    assert place(2, "cpu", cpus=usable[:2], gpus=0).threads == 1  # usable cores = len(cpus)
    with pytest.raises(LaunchError, match="at least one core per rank"):
        rank_cores(usable[:1], 2)
    with pytest.raises(LaunchError, match="cores this process may use"):
        rank_cores([max(usable) + 1000], 1)
    with pytest.raises(LaunchError, match="inprocess"):
        launch(_affinity, 1, cpus=usable[:1], inprocess=True)
    if len(usable) < 2:
        pytest.skip("needs two usable cores")
    outs = launch(_affinity, 2, cpus=usable[:2], device="cpu")
    assert [o[0] for o in outs] == [[usable[0]], [usable[1]]]  # what each rank process reports
    assert [list(o[1]) for o in outs] == [[usable[0]], [usable[1]]] and outs[0][2] == 1
    assert [o[3] for o in outs] == [[usable[0]], [usable[1]]]  # its DataLoader worker: inherited
    free = launch(_affinity, 1, device="cpu")[0]
    assert free[0] == usable and free[1] == ()  # no cpus: not pinned


def test_one_device_vocabulary_request_kind_ran_on_torch_device():
    """Requests say auto/cpu/cuda; where work ran is "cpu" or "cuda:N" (what the GPU tests and
    every record use); the refusal names the ranks and the GPUs visible."""
    assert place(1, "cuda", gpus=1).devices == ("cuda:0",)
    assert place(2, "auto", gpus=2).devices == ("cuda:0", "cuda:1")
    assert place(2, "auto", gpus=1).devices == ("cpu", "cpu")
    with pytest.raises(LaunchError) as info:
        place(2, "cuda", gpus=1)
    assert "needs one GPU per rank: ranks=2 but 1 GPU(s) are visible" in str(info.value)
