"""Devices, threads, memory guards and peaks for chapter 01's experiments (GPU vs CPU).

Every chapter-01 run goes through these helpers so that the same rules hold everywhere:

- :class:`DevicesConfig`, the base of the six configs: ``compare_devices=True`` (the default)
  measures the CPU and every visible GPU side by side; with it off, ``device`` (``auto``, ``cpu``
  or ``cuda``, the one vocabulary of :mod:`hpclab.dist.placement`) is the one device
  :func:`hpclab.dist.place` gives one process (``cuda`` is GPU 0, refused when there is none).
  Comparing is an option with its own name, not a device: ``device="all"`` is refused, naming it.
- ``torch_threads(n)`` (:mod:`hpclab.dist.placement`, the library's one thread setter) sets the
  CPU thread count for one run and restores it afterwards; it is called *inside* the run.
- ``ensure_fits(nbytes, device)`` refuses a size before anything is allocated, naming the size
  asked and the memory available (psutil on the host, ``torch.cuda.mem_get_info`` on a GPU).
- ``peak_gflops(device, dtype, threads)`` is the theoretical peak with its source: on the CPU
  ``threads x measured clock x FLOP/cycle`` from :func:`hpclab.measure.sysinfo.system_info`, on a
  GPU the datasheet figure from :func:`hpclab.measure.peaks.gpu_peak_tflops`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from hpclab.config import Config, ConfigError, param
from hpclab.dist.placement import DEVICES, gpu_count, place, torch_threads  # noqa: F401 - dev.*

GIB = 2**30
# Names the course uses for dtypes; "tf32" is fp32 storage with TensorFloat-32 tensor-core math.
DTYPES: dict[str, torch.dtype] = {
    "fp64": torch.float64,
    "fp32": torch.float32,
    "tf32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}
# The CLI example in the chapter says --dtype float32: accept torch's names as well.
ALIASES = {"float64": "fp64", "float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
DTYPE_CHOICES = tuple(DTYPES) + tuple(ALIASES)
# Fraction of available memory a run may take: the rest is for the kernel, Python, other users.
MEMORY_FRACTION = 0.8


def canonical_dtype(name: str) -> str:
    return ALIASES.get(name, name)


# The old spelling of comparing (a device "all"), refused with the option that replaced it.
ALL_REFUSED = (
    "device='all' is not a device: to run the CPU and every visible GPU side by side, use "
    "compare_devices=True (--compare-devices); allowed devices: " + ", ".join(DEVICES)
)


def resolve_devices(device: str, compare: bool = False) -> list[str]:
    """``compare`` -> the CPU and every visible GPU (chapter 01 compares them side by side);
    otherwise the one device :func:`hpclab.dist.place` gives one process for ``device``
    (``auto``, ``cpu`` or ``cuda`` = GPU 0), or its one-line refusal when no GPU is visible."""
    if device == "all":
        raise ConfigError(ALL_REFUSED)
    if compare:
        return ["cpu"] + [f"cuda:{i}" for i in range(gpu_count())]
    return [place(1, device).devices[0]]


@dataclass(frozen=True)
class DevicesConfig(Config):
    """Where a chapter-01 run measures: the base of its experiments' configs (their first two
    fields). Comparing every device is the default, so a GPU node shows its GPUs beside the CPU
    without being asked; naming one device (``--device cpu``) measures that one alone."""

    device: str = param(
        "auto",
        choices=DEVICES,
        help="auto (with compare_devices: the CPU and every visible GPU; without: GPU 0 if "
        "any, else the CPU), cpu, or cuda (GPU 0)",
    )
    compare_devices: bool = param(
        True,
        help="with device auto, run the CPU and every visible GPU side by side (a device named "
        "explicitly, cpu or cuda, is measured alone)",
    )

    def __post_init__(self) -> None:
        if self.device == "all":  # before the choices check, whose message cannot name the option
            raise ConfigError(ALL_REFUSED)
        super().__post_init__()

    def devices(self) -> list[str]:
        """The devices this run measures, CPU first (see :func:`resolve_devices`)."""
        return resolve_devices(self.device, self.compare_devices and self.device == "auto")


def gpu_facts(device: str) -> dict[str, Any]:
    """Name, memory and capability of GPU ``device`` from NVML/nvidia-smi
    (:func:`hpclab.measure.sysinfo.gpu_inventory`): a lookup must not initialise CUDA, or every
    later start of ranks in this kernel could not fork. Empty when the inventory lacks it."""
    from hpclab.measure.sysinfo import system_info

    index = torch.device(device).index or 0
    gpus = system_info().get("gpus") or []
    return gpus[index] if index < len(gpus) else {}


def device_name(device: str) -> str:
    if device == "cpu":
        from hpclab.measure.sysinfo import system_info

        return system_info().get("cpu_model") or "CPU"
    return gpu_facts(device).get("name") or torch.cuda.get_device_name(torch.device(device))


def _capability(device: str) -> tuple[int, int]:
    known = gpu_facts(device).get("capability")
    if known:
        major, _, minor = str(known).partition(".")
        return int(major), int(minor or 0)
    return torch.cuda.get_device_capability(torch.device(device))


def unsupported(device: str, dtype: str) -> str | None:
    """Why ``dtype`` cannot run on ``device`` (None when it can)."""
    dtype = canonical_dtype(dtype)
    if dtype not in DTYPES:
        return f"dtype={dtype!r} is not known; allowed: {', '.join(DTYPES)}"
    if device == "cpu":
        if dtype == "tf32":
            return "tf32 is a tensor-core mode of NVIDIA Ampere and newer GPUs, not a CPU dtype"
        return None
    major, _minor = _capability(device)
    if dtype == "tf32" and major < 8:
        return f"tf32 needs an Ampere or newer GPU (capability >= 8.0); {device} is {major}.x"
    if dtype == "bf16" and major < 8:  # what torch.cuda.is_bf16_supported() checks, sans init
        return f"bf16 needs an Ampere or newer GPU (capability >= 8.0); {device} is {major}.x"
    return None


@contextlib.contextmanager
def tf32_mode(enabled: bool) -> Iterator[None]:
    """TensorFloat-32 matmuls (and cuDNN convs) on or off for a block; restores the old mode."""
    old_mm = torch.backends.cuda.matmul.allow_tf32
    old_cudnn = torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old_mm
        torch.backends.cudnn.allow_tf32 = old_cudnn


def available_bytes(device: str) -> int:
    """Free memory on ``device`` now: psutil's ``available`` on the host, cudaMemGetInfo on a GPU."""
    if device == "cpu":
        import psutil

        return int(psutil.virtual_memory().available)
    free, _total = torch.cuda.mem_get_info(torch.device(device))
    return int(free)


def ensure_fits(nbytes: float, device: str, what: str) -> None:
    """Raise a one-line ConfigError if ``nbytes`` would not fit; call it *before* allocating."""
    avail = available_bytes(device)
    if nbytes > MEMORY_FRACTION * avail:
        raise ConfigError(
            f"{what} needs {nbytes / GIB:.2f} GiB on {device}, but only {avail / GIB:.2f} GiB "
            f"are available (at most {MEMORY_FRACTION:.0%} may be used): choose a smaller size"
        )


def element_size(dtype: str) -> int:
    return torch.empty((), dtype=DTYPES[canonical_dtype(dtype)]).element_size()


def peak_gflops(device: str, dtype: str, threads: int | None = None) -> tuple[float | None, str]:
    """Theoretical peak GFLOP/s of ``dtype`` on ``device`` and where the figure comes from.

    CPU: ``threads`` cores x measured clock x FLOP/cycle/core (chapter 00's derivation); threads
    beyond the allocation's physical cores add nothing (SMT siblings share a core's FMA pipes).
    GPU: the datasheet's dense figure; fp64 GEMM uses the FP64 tensor cores where the GPU has
    them (cuBLAS does on A100/H100), and ``fp32`` means TF32 switched off.
    """
    dtype = canonical_dtype(dtype)
    from hpclab.measure.sysinfo import system_info

    if device == "cpu":
        from hpclab.measure.peaks import flops_per_cycle
        from hpclab.measure.sysinfo import cpuinfo

        info = system_info()
        # SMT siblings share a core's FMA pipes: more threads than physical cores add no peak
        physical = info.get("cores_physical") or info["cores_usable"]
        threads = min(threads or physical, physical)
        clock = info.get("clock_ghz")
        cpu = cpuinfo()
        fpc, reason = flops_per_cycle(
            cpu["flags"], cpu["vendor"] or "", cpu["model"] or "", cpu["family"]
        ).get(dtype, (None, ""))
        if not fpc or not clock:
            return None, "no CPU peak: the clock or the FLOP/cycle of this CPU is unknown"
        value = threads * clock * fpc
        method = (
            "measured" if str(info.get("clock_method", "")).startswith("measured") else "nominal"
        )
        return value, (
            f"{threads} threads x {clock:.2f} GHz ({method}) x {fpc} FLOP/cycle ({reason}) "
            f"= {value:.1f} GFLOP/s"
        )
    from hpclab.measure.peaks import gpu_peak_tflops

    name = device_name(device)
    spec = gpu_peak_tflops(name)
    if spec is None:
        return None, f"no datasheet peak known for {name!r}"
    key = "fp64_tensor" if dtype == "fp64" and "fp64_tensor" in spec else dtype
    if key not in spec:
        return None, f"{spec['source']} lists no {dtype} figure for {spec['spec']}"
    return spec[key] * 1e3, f"{spec['spec']} {key} {spec[key]} TFLOP/s dense ({spec['source']})"


def gpu_reference(spec_name: str) -> dict[str, Any] | None:
    """Datasheet row for a GPU model name such as ``"H100 SXM"`` (for reference tiers)."""
    from hpclab.measure.peaks import gpu_peak_tflops

    return gpu_peak_tflops(spec_name)


def gpu_sentence() -> str:
    """One sentence for chapter 01's notebook: what is live here and what a GPU run would add."""
    n = gpu_count()
    if n == 0:
        return (
            "No GPU is visible here, so GPU rows below are published figures or datasheet "
            "models, each labelled with its source; on a GPU node the same cells time cuBLAS and "
            "cuDNN live with CUDA events and place each GPU against its own datasheet peak."
        )
    names = ", ".join(f"cuda:{i} {device_name(f'cuda:{i}')}" for i in range(n))
    return f"{n} GPU(s) visible ({names}): GPU rows below are measured live, with CUDA events."
