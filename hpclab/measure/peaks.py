"""Theoretical peaks: CPU FLOP/cycle from SIMD flags, GPU peaks from datasheets (chapter 00).

A CPU peak is ``cores x clock x FLOP/cycle/core``. FLOP/cycle/core is
``FMA pipes x lanes per vector x 2`` (an FMA is a multiply and an add). The pipe counts and
widths below come from the vendors' optimisation manuals and Agner Fog's microarchitecture guide
(https://www.agner.org/optimize/microarchitecture.pdf); every figure carries its derivation so
a student can check it. A known CPU can be forced with ``HPCLAB_FLOPS_PER_CYCLE`` (the fp32
figure; fp64 is then half of it).

GPU peaks are datasheet numbers, *dense* (NVIDIA's headline tensor figures for Hopper and Ampere
assume 2:4 sparsity; we halve them), with the datasheet named in ``source``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any

DTYPES = ("fp64", "fp32", "bf16", "fp16")

# Intel AMX: the TMUL unit does 1024 bf16 (and fp16 on Granite Rapids) FLOP/cycle/core
# (Intel 64 and IA-32 Architectures Optimization Reference Manual, chapter "Intel AMX":
# 16x32 bf16 tile times 32x16 per 16 cycles = 512 FMA = 1024 FLOP/cycle).
AMX_FLOPS_PER_CYCLE = 1024


def _fp32_rule(flags: set[str], vendor: str, model: str, family: int | None) -> tuple[int, str]:
    """fp32 FLOP/cycle/core and why, from the widest FMA path the core has."""
    amd = "amd" in vendor.lower() or "AMD" in model
    intel = "intel" in vendor.lower() or "Intel" in model
    if "asimd" in flags or "sve" in flags:  # aarch64 lists "Features", not x86 flags
        if "sve" in flags:
            return 32, (
                "aarch64 SVE: assumed 4 x 128-bit FMA pipes = 4x4x2 (Neoverse V2/Grace; "
                "V1 is 2 x 256-bit, same total); set HPCLAB_FLOPS_PER_CYCLE if yours differs"
            )
        return 16, (
            "aarch64 NEON: assumed 2 x 128-bit FMA pipes = 2x4x2 (Neoverse N1); "
            "Apple M-series and Neoverse V have 4 pipes (32): set HPCLAB_FLOPS_PER_CYCLE"
        )
    if "avx512f" in flags:
        if amd and family == 25:
            return 32, "Zen 4: 2 x 256-bit FMA pipes, AVX-512 double-pumped = 2x8x2"
        if amd and family is not None and family >= 26:
            return 64, "Zen 5: 2 x 512-bit FMA pipes = 2x16x2 (mobile Zen 5 is 256-bit: 32)"
        if amd:
            return 32, "AMD AVX-512: assumed 2 x 256-bit FMA pipes = 2x8x2"
        one_fma = re.search(r"(Bronze|Silver) \d{4}|Gold 5[12]\d\d|Core\(TM\)|Core i\d", model)
        if intel and "amx_tile" not in flags and one_fma and "Gold 5122" not in model:
            # Skylake/Cascade Lake Bronze, Silver and Gold 5xxx (except 5122), and client
            # Ice/Tiger/Rocket Lake have one 512-bit FMA unit (Intel ARK, "# of AVX-512 FMA Units").
            return 32, "Intel AVX-512 with 1 x 512-bit FMA unit = 1x16x2 (per Intel ARK)"
        return 64, "Intel Xeon AVX-512: 2 x 512-bit FMA units = 2x16x2 (Gold 6xxx, Platinum)"
    if "avx2" in flags and "fma" in flags:
        if amd and family == 23 and _zen1(model):
            return 16, "Zen 1: 2 x 128-bit FMA pipes (AVX2 split in halves) = 2x4x2"
        return 32, "AVX2+FMA: 2 x 256-bit FMA pipes = 2x8x2 (Haswell and later, Zen 2/3)"
    if "avx" in flags:
        return 16, "AVX, no FMA: 1 x 256-bit add + 1 x 256-bit mul = 8+8 (Sandy/Ivy Bridge)"
    if "sse2" in flags:
        return 8, "SSE2: 1 x 128-bit add + 1 x 128-bit mul = 4+4"
    return 2, "no known SIMD flags: scalar, 1 add + 1 mul per cycle"


def _zen1(model: str) -> bool:
    """Zen 1/Zen+ by name: EPYC 7xx1 (Naples), Ryzen and Threadripper 1xxx/2xxx."""
    return bool(re.search(r"EPYC 7\d\d1|Ryzen \d [12]\d\d\d|Threadripper [12]\d\d\d", model))


def flops_per_cycle(
    flags: Iterable[str],
    vendor: str = "",
    model: str = "",
    family: int | None = None,
) -> dict[str, tuple[int, str]]:
    """FLOP/cycle/core per dtype (``fp64 fp32 bf16 fp16``) with the reason for each (chapter 00).

    ``flags`` are /proc/cpuinfo flags (x86) or Features (aarch64); ``family`` is the
    ``cpu family`` number, which tells AMD Zen 4 (25) from Zen 5 (26).
    """
    fl = {f.lower() for f in flags}
    override = os.environ.get("HPCLAB_FLOPS_PER_CYCLE", "").strip()
    fp32, why = _fp32_rule(fl, vendor or "", model or "", family)
    if override:
        try:
            fp32, why = int(float(override)), f"set by HPCLAB_FLOPS_PER_CYCLE={override}"
        except ValueError:
            why += f" (ignored HPCLAB_FLOPS_PER_CYCLE={override!r}: not a number)"
    out = {
        "fp32": (fp32, why),
        "fp64": (fp32 // 2, "half of fp32: a vector holds half as many doubles"),
    }
    if "amx_bf16" in fl:
        out["bf16"] = (AMX_FLOPS_PER_CYCLE, "AMX tiles: 1024 bf16 FLOP/cycle (Intel opt. manual)")
    elif "avx512_bf16" in fl:
        out["bf16"] = (2 * fp32, "avx512_bf16 (vdpbf16ps): bf16 pairs into fp32 = 2 x fp32")
    else:
        out["bf16"] = (fp32, "no native bf16: converted to fp32, peak = fp32 rate")
    if "amx_fp16" in fl:
        out["fp16"] = (AMX_FLOPS_PER_CYCLE, "AMX-FP16 tiles: 1024 fp16 FLOP/cycle (Granite Rapids)")
    elif "avx512_fp16" in fl:
        out["fp16"] = (2 * fp32, "avx512_fp16: 32 fp16 lanes per 512-bit FMA = 2 x fp32")
    elif "asimdhp" in fl:
        out["fp16"] = (2 * fp32, "aarch64 FP16 arithmetic (asimdhp): 8 lanes per 128 bits")
    else:
        out["fp16"] = (fp32, "no native fp16: converted to fp32, peak = fp32 rate")
    return out


def cpu_peaks(
    cores: int,
    clock_ghz: float | None,
    flags: Iterable[str],
    vendor: str = "",
    model: str = "",
    *,
    family: int | None = None,
    clock_label: str = "measured",
) -> dict[str, dict[str, Any]]:
    """Peak GFLOP/s per dtype for ``cores`` cores at ``clock_ghz`` (chapter 00).

    Returns ``{dtype: {"gflops", "flops_per_cycle", "derivation"}}``; ``gflops`` is None when
    the clock is unknown. Example derivation:
    ``2 cores x 3.65 GHz (measured) x 32 FLOP/cycle (Zen 4: ...) = 233.6 GFLOP/s``.
    """
    out: dict[str, dict[str, Any]] = {}
    for dtype, (fpc, why) in flops_per_cycle(flags, vendor, model, family).items():
        if clock_ghz is None or cores < 1:
            gflops = None
            text = f"{cores} cores x unknown clock x {fpc} FLOP/cycle ({why}): no peak"
        else:
            gflops = cores * clock_ghz * fpc
            text = (
                f"{cores} cores x {clock_ghz:.2f} GHz ({clock_label}) x {fpc} FLOP/cycle "
                f"({why}) = {gflops:.1f} GFLOP/s"
            )
        out[dtype] = {"gflops": gflops, "flops_per_cycle": fpc, "derivation": text}
    return out


# --- GPUs -------------------------------------------------------------------------------------
# TFLOP/s, dense (no sparsity). fp64_tensor is the FP64 tensor-core rate where one exists.
# mem_bw_gbps: HBM/GDDR bandwidth per GPU in GB/s. Patterns are tried in order (specific first)
# against the upper-cased name torch/NVML report, e.g. "NVIDIA H100 80GB HBM3".
_H100_SXM = {
    "fp64": 34.0,
    "fp64_tensor": 67.0,
    "fp32": 67.0,
    "tf32": 494.7,
    "bf16": 989.4,
    "fp16": 989.4,
    "fp8": 1978.9,
}
_H100_NVL = {
    "fp64": 30.0,
    "fp64_tensor": 60.0,
    "fp32": 60.0,
    "tf32": 417.5,
    "bf16": 835.5,
    "fp16": 835.5,
    "fp8": 1670.5,
}
_A100 = {
    "fp64": 9.7,
    "fp64_tensor": 19.5,
    "fp32": 19.5,
    "tf32": 156.0,
    "bf16": 312.0,
    "fp16": 312.0,
}
# Blackwell, dense (no sparsity); FP4 (9,000 / 10,000) is not a dtype this table rates.
_B200_HGX = {"fp64": 40.0, "fp64_tensor": 40.0, "fp32": 80.0, "tf32": 1100.0, "bf16": 2250.0,
             "fp16": 2250.0, "fp8": 4500.0}  # fmt: skip
_B200_GB200 = {"fp64": 45.0, "fp64_tensor": 45.0, "fp32": 90.0, "tf32": 1250.0, "bf16": 2500.0,
               "fp16": 2500.0, "fp8": 5000.0}  # fmt: skip
_DS = "NVIDIA {} datasheet"
_BW = "NVIDIA {} datasheet, dense figures as tabulated at glennklockwood.com/garden/processors/B200"
_GPU_TABLE: list[tuple[str, str, dict[str, float], float, str]] = [
    # (regex, spec name, TFLOP/s, GB/s, source)
    (r"GB200", "GB200 (B200 at 1,200 W)", _B200_GB200, 8000.0, _BW.format("GB200")),
    (r"B200", "HGX B200 (1,000 W)", _B200_HGX, 8000.0, _BW.format("HGX B200")),
    (r"GH200", "GH200 (H100 SXM compute)", _H100_SXM, 4000.0, _DS.format("GH200 Grace Hopper")),
    (r"H200.*NVL", "H200 NVL", _H100_NVL, 4800.0, _DS.format("H200")),
    (r"H200", "H200 SXM", _H100_SXM, 4800.0, _DS.format("H200 (same compute as H100 SXM)")),
    (r"H100.*NVL", "H100 NVL", _H100_NVL, 3900.0, _DS.format("H100")),
    (
        r"H100.*PCIE",
        "H100 PCIe",
        {
            "fp64": 26.0,
            "fp64_tensor": 51.0,
            "fp32": 51.0,
            "tf32": 378.0,
            "bf16": 756.5,
            "fp16": 756.5,
            "fp8": 1513.0,
        },
        2000.0,
        _DS.format("H100"),
    ),
    (r"H100", "H100 SXM", _H100_SXM, 3350.0, _DS.format("H100")),
    (r"A100.*(PCIE.*80GB|80GB.*PCIE)", "A100 PCIe 80GB", _A100, 1935.0, _DS.format("A100")),
    (r"A100.*PCIE", "A100 PCIe 40GB", _A100, 1555.0, _DS.format("A100")),
    (r"A100.*80GB", "A100 SXM 80GB", _A100, 2039.0, _DS.format("A100")),
    (r"A100", "A100 SXM 40GB", _A100, 1555.0, _DS.format("A100")),
    (
        r"L40S",
        "L40S",
        {"fp64": 1.4, "fp32": 91.6, "tf32": 183.0, "bf16": 362.1, "fp16": 362.1, "fp8": 733.0},
        864.0,
        _DS.format("L40S"),
    ),
    (
        r"\bA40\b",
        "A40",
        {"fp64": 0.6, "fp32": 37.4, "tf32": 74.8, "bf16": 149.7, "fp16": 149.7},
        696.0,
        _DS.format("A40"),
    ),
    (
        r"V100S",
        "V100S PCIe",
        {"fp64": 8.2, "fp32": 16.4, "fp16": 130.0},
        1134.0,
        _DS.format("V100"),
    ),
    (
        r"V100.*PCIE",
        "V100 PCIe",
        {"fp64": 7.0, "fp32": 14.0, "fp16": 112.0},
        900.0,
        _DS.format("V100"),
    ),
    (r"V100", "V100 SXM2", {"fp64": 7.8, "fp32": 15.7, "fp16": 125.0}, 900.0, _DS.format("V100")),
    (
        r"P100.*PCIE.*12GB",
        "P100 PCIe 12GB",
        {"fp64": 4.7, "fp32": 9.3, "fp16": 18.7},
        549.0,
        _DS.format("Tesla P100"),
    ),
    (
        r"P100.*PCIE",
        "P100 PCIe 16GB",
        {"fp64": 4.7, "fp32": 9.3, "fp16": 18.7},
        732.0,
        _DS.format("Tesla P100"),
    ),
    (
        r"P100",
        "P100 SXM2",
        {"fp64": 5.3, "fp32": 10.6, "fp16": 21.2},
        732.0,
        _DS.format("Tesla P100"),
    ),
    (r"\bT4\b", "T4", {"fp64": 0.25, "fp32": 8.1, "fp16": 65.0}, 320.0, _DS.format("Tesla T4")),
    (r"K40", "K40", {"fp64": 1.43, "fp32": 4.29}, 288.0, _DS.format("Tesla K40 (boost clock)")),
]


def gpu_peak_tflops(name: str | None) -> dict[str, Any] | None:
    """Datasheet peaks for a GPU named as torch or NVML report it, or None (chapter 00).

    Returns ``{dtype: TFLOP/s, ..., "mem_bw_gbps": GB/s, "spec": matched model, "source": ...}``
    with dtypes among ``fp64 fp64_tensor fp32 tf32 bf16 fp16 fp8`` (dense, no sparsity).
    fp16 on V100/T4/P100 is the tensor-core (V100, T4) or packed half2 (P100) rate.
    """
    if not name:
        return None
    upper = name.upper()
    for pattern, spec, tflops, bw, source in _GPU_TABLE:
        if re.search(pattern, upper):
            return {**tflops, "mem_bw_gbps": bw, "spec": spec, "source": source}
    return None
