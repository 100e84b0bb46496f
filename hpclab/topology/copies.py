"""Timed copies between host and device memory (chapter 02), used by ``host-copy`` and ``p2p``.

Bandwidth here is **bytes copied per second** (what CUDA's bandwidthTest and nvbandwidth report;
chapter 01's STREAM counts the read and the write, twice as many bytes). Every copy is timed by
:func:`hpclab.measure.timing.time_fn` (warm-up, CUDA events on a GPU, repeats, spread) after a
check that the destination holds the source's bytes.

Host memory comes in kinds:

- ``warm``: a buffer allocated and written before timing: its pages are mapped;
- ``first-touch``: a fresh anonymous mapping for every copy: each 4 KiB page faults into
  existence on first write (the kernel zeroes it), which often costs more than the copy itself
  (in a virtual machine every fault also goes through the hypervisor's page tables);
- ``locked``: a warm buffer pinned in RAM with ``mlock`` (the host side of CUDA's pinned memory:
  the driver can DMA from pages that cannot move);
- ``pageable`` / ``pinned``: host buffers for a GPU copy; a pageable copy is staged by the driver
  through its own pinned buffer (one more memcpy), a pinned one goes straight over PCIe.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap

import torch

from hpclab.measure.timing import Timing, time_fn


def pinned_available() -> tuple[bool, str]:
    """(True, "") where ``pin_memory()`` works, else (False, one sentence why)."""
    if not torch.cuda.is_available():
        return False, (
            "Pinned (page-locked) host memory and CUDA streams need a CUDA GPU and a CUDA build "
            f"of torch; this is torch {torch.__version__} without a usable GPU."
        )
    try:
        torch.empty(8, dtype=torch.uint8).pin_memory()
    except RuntimeError as exc:
        return False, f"pin_memory() failed here: {str(exc).splitlines()[0]}"
    return True, ""


def _fill(t: torch.Tensor) -> torch.Tensor:
    """A recognisable byte pattern (0..250 repeating) so a missed copy shows."""
    n = t.numel()
    pattern = torch.arange(251, dtype=torch.uint8, device=t.device)
    t.copy_(pattern.repeat(n // 251 + 1)[:n])
    return t


class _checker:
    """Compares ~97 bytes spread over a copy's destination with the source's."""

    def __init__(self, src: torch.Tensor) -> None:
        n = src.numel()
        k = min(n, 97)
        self.idx = torch.arange(k) * (n - 1) // max(k - 1, 1)
        self.want = src.cpu()[self.idx]

    def compare(self, sampled: torch.Tensor) -> None:
        if not torch.equal(sampled.cpu(), self.want):
            raise AssertionError("the copy's destination does not hold the source's bytes")

    def __call__(self, out: torch.Tensor) -> None:
        self.compare(out.cpu()[self.idx])


def _anonymous(nbytes: int) -> tuple[mmap.mmap, torch.Tensor]:
    """A fresh anonymous mapping (no page is resident until written) viewed as a uint8 tensor."""
    buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return buf, torch.frombuffer(buf, dtype=torch.uint8, count=nbytes)


def _mlock(tensor: torch.Tensor) -> bool:
    """Lock a host tensor's pages in RAM (``mlock``); False when refused (RLIMIT_MEMLOCK)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    size = tensor.numel() * tensor.element_size()
    return libc.mlock(ctypes.c_void_p(tensor.data_ptr()), ctypes.c_size_t(size)) == 0


def warm_pair(nbytes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A source holding the byte pattern and a destination, both written (every page mapped)
    before any copy is timed; ``benchmarks/topology.py`` times its plain loop on the same."""
    src = _fill(torch.empty(nbytes, dtype=torch.uint8))
    dst = torch.empty(nbytes, dtype=torch.uint8)
    dst.fill_(0)  # touch every page before timing
    return src, dst


def host_copy(nbytes: int, memory: str, repeat: int = 10) -> tuple[Timing, str]:
    """Time a host-to-host copy of ``nbytes`` into ``memory`` = warm | first-touch | locked.

    Returns (timing, note); the note is non-empty when ``locked`` fell back to ``warm``.
    """
    note = ""
    if memory == "first-touch":
        src = _fill(torch.empty(nbytes, dtype=torch.uint8))
        check = _checker(src)
        idx = check.idx

        def fn() -> torch.Tensor:
            # A new mapping per call; dropping it at return unmaps it (its pages go back).
            _buf, dst = _anonymous(nbytes)
            dst.copy_(src)
            return dst[idx].clone()

        return time_fn(fn, repeat=repeat, check=lambda got: check.compare(got)), note
    src, dst = warm_pair(nbytes)
    if memory == "locked" and not _mlock(dst):
        note = "mlock was refused (RLIMIT_MEMLOCK, see `ulimit -l`): timed as a warm buffer"
    timing = time_fn(lambda: dst.copy_(src), repeat=repeat, check=_checker(src))
    return timing, note


def gpu_copy(nbytes: int, memory: str, direction: str, device: str, repeat: int = 10) -> Timing:
    """Time a host<->GPU copy: ``memory`` pageable | pinned, ``direction`` h2d | d2h | both.

    ``both`` runs an H2D and a D2H copy of ``nbytes`` each at once on two streams (a PCIe link
    is full duplex) and reports per-call time for the pair.
    """
    host = _fill(torch.empty(nbytes, dtype=torch.uint8))
    if memory == "pinned":
        host = host.pin_memory()
    dev = _fill(torch.empty(nbytes, dtype=torch.uint8, device=device))
    nb = memory == "pinned"
    if direction in ("h2d", "d2h"):
        src, dst = (host, dev) if direction == "h2d" else (dev, host)
        return time_fn(
            lambda: dst.copy_(src, non_blocking=nb),
            device=device,
            repeat=repeat,
            check=_checker(src),
        )
    host2 = _fill(torch.empty(nbytes, dtype=torch.uint8))
    host2 = host2.pin_memory() if nb else host2
    dev2 = torch.empty(nbytes, dtype=torch.uint8, device=device)
    up, down = torch.cuda.Stream(device), torch.cuda.Stream(device)

    def both() -> torch.Tensor:
        main = torch.cuda.current_stream(device)
        up.wait_stream(main)
        down.wait_stream(main)
        with torch.cuda.stream(up):
            dev2.copy_(host, non_blocking=nb)
        with torch.cuda.stream(down):
            host2.copy_(dev, non_blocking=nb)
        main.wait_stream(up)
        main.wait_stream(down)
        return dev2

    return time_fn(both, device=device, repeat=repeat, check=_checker(host))


def peer_copy(nbytes: int, src: str, dst: str, via_host: bool, repeat: int = 10) -> Timing:
    """Time a GPU-to-GPU copy: direct (P2P where the pair allows it) or staged through pinned
    host memory (device -> host, host -> device), as Mao 2015 contrasts them."""
    a = _fill(torch.empty(nbytes, dtype=torch.uint8, device=src))
    b = torch.empty(nbytes, dtype=torch.uint8, device=dst)
    if not via_host:
        return time_fn(lambda: b.copy_(a), device=dst, repeat=repeat, check=_checker(a))
    staging = torch.empty(nbytes, dtype=torch.uint8).pin_memory()

    def staged() -> torch.Tensor:
        staging.copy_(a)  # synchronous w.r.t. the source GPU: the bytes are in host memory
        return b.copy_(staging)

    return time_fn(staged, device=dst, repeat=repeat, check=_checker(a))
