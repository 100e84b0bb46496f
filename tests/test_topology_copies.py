"""Chapter 02: copy bandwidth records against a plain memcpy, first-touch vs warm, the
copy/compute pipeline model, and the GPU-less paths saying what is missing."""

from __future__ import annotations

import resource

import pytest
import torch

from hpclab import experiments
from hpclab.compute.device import torch_threads
from hpclab.config import ConfigError
from hpclab.topology import copies, overlap


def test_host_copy_records_are_bytes_over_seconds():
    res = experiments.run(
        "host-copy", sizes_kib=(1024,), memory=("warm",), repeat=20, references=False
    )
    (rec,) = [r for r in res.records if r.get("gbps")]
    assert rec["memory"] == "warm" and rec["direction"] == "host" and rec["bytes"] == 2**20
    assert rec["gbps"] == pytest.approx(rec["bytes"] / rec["seconds"] / 1e9)
    # the best sample is at least the median (how close to a plain loop: benchmarks/topology.py)
    assert rec["gbps_best"] >= rec["gbps"]


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


N, REPEAT = 16 * 2**20, 5
PAGES = N // resource.getpagesize()


def _faults_beside_warm(kind: str):
    """(page faults of a warm copy, of a ``kind`` copy, the ``kind`` copy's (timing, note)), each
    copy of ``N`` bytes timed ``REPEAT`` times on one thread."""
    with torch_threads(1):
        f0 = _minor_faults()
        copies.host_copy(N, "warm", repeat=REPEAT)
        f1 = _minor_faults()
        out = copies.host_copy(N, kind, repeat=REPEAT)
        f2 = _minor_faults()
    return f1 - f0, f2 - f1, out


def test_first_touch_pays_for_page_faults():
    """Counted, not timed: a first-touch copy faults every 4 KiB page of its destination in
    (the kernel zeroes each one), every time; a warm copy faults none while it is timed."""
    warm, fresh, _ = _faults_beside_warm("first-touch")
    # both fault their buffers in once before timing; first-touch also faults a whole fresh
    # destination in on every call (2 untimed + ``REPEAT`` timed), warm on none
    assert fresh - warm >= REPEAT * PAGES * 0.9, (warm, fresh, PAGES)


def test_locked_buffer_copies_like_a_warm_one_or_says_why():
    """Counted, not timed: a locked (page-locked, "pinned") destination is faulted in once, before
    the clock starts, and never again, as a warm one (a first-touch copy faults all of its pages
    on every call); where locking is refused, the note says why. The one fault-in may or may not
    show beside the warm copy's (a warm buffer can reuse memory the allocator already holds):
    at most one buffer's pages, never one per call."""
    warm, locked, (timing, note) = _faults_beside_warm("locked")
    assert note == "" or "RLIMIT_MEMLOCK" in note
    assert locked - warm < 2 * PAGES < 0.9 * REPEAT * PAGES, (warm, locked, PAGES)
    assert len(timing.samples_s) == REPEAT


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only path")
def test_gpu_kinds_without_a_gpu_say_so_in_one_sentence():
    res = experiments.run("host-copy", sizes_kib=(4,), memory=("warm", "pinned"), repeat=3)
    (missing,) = [r for r in res.records if r.get("memory") == "pageable/pinned"]
    assert (
        missing["note"].endswith(".") and ". " not in missing["note"] and "CUDA" in missing["note"]
    )
    refs = [r for r in res.records if r["tier"] == "reference"]
    from hpclab.results import load_reference

    ours = {r["gbps"] for r in load_reference("h200_host_copy").records}
    assert len(ours) == 2  # this course's H200 run: pinned and pageable
    assert {r["gbps"] for r in refs} == {6.0, 55.6} | ours and all(r["source"] for r in refs)
    p2p = experiments.run("p2p", processes=False)
    assert "two GPUs" in p2p.records[0]["note"] and len(p2p.records) == 1
    with pytest.raises(ConfigError, match="no GPU"):
        experiments.run("host-copy", device="cuda")


def test_sizes_too_large_are_refused_with_the_limit():
    with pytest.raises(ConfigError, match="available"):
        experiments.run("host-copy", sizes_kib=(2**28,), memory=("warm",))  # 256 GiB
    with pytest.raises(ConfigError, match="sizes_kib"):
        experiments.run("host-copy", sizes_kib=(0,))


@pytest.mark.parametrize("copy_s,compute_s", [(0.01, 0.03), (0.03, 0.01), (0.02, 0.02)])
def test_pipeline_schedule_agrees_with_the_formula(copy_s, compute_s):
    for steps in (2, 3, 8):
        events = overlap.schedule(copy_s, compute_s, steps, overlapped=True)
        end = max(e["end_s"] for e in events)
        assert end == pytest.approx(overlap.pipelined_total(copy_s, compute_s, steps))
        serial = overlap.schedule(copy_s, compute_s, steps, overlapped=False)
        assert max(e["end_s"] for e in serial) == pytest.approx(
            overlap.serial_total(copy_s, compute_s, steps)
        )
        # a compute never starts before its own batch arrived
        by = {(e["step"], e["op"]): e for e in events}
        assert all(by[(i, "compute")]["start_s"] >= by[(i, "copy")]["end_s"] for i in range(steps))


def test_overlap_experiment_on_this_machine():
    res = experiments.run("overlap")
    totals = {r["mode"]: r for r in res.records if r["record"] == "total" and r["tier"] == "model"}
    assert totals["overlapped"]["seconds"] < totals["serial"]["seconds"]
    if not torch.cuda.is_available():
        compute = next(r for r in res.records if r.get("op") == "compute" and r["tier"] == "live")
        assert compute["seconds"] == pytest.approx(totals["serial"]["compute_s"])
        assert "CUDA" in totals["serial"]["note"]
    assert len(experiments.get("overlap").plot(res).data) == 2


def test_process_copies_one_hop_beats_extra_buffers():
    """The CPU analogue of P2P vs staging: shared memory vs gloo vs a pickled object."""
    if torch.cuda.is_available():
        pytest.skip("the GPU path measures GPU pairs instead")
    res = experiments.run("p2p", size_mib=16, repeat=3)
    by = {r["method"]: r for r in res.records if r.get("record") == "process"}
    assert set(by) == {"shared memory", "gloo send/recv", "pickled object"}
    assert all(r["bytes"] == 16 * 2**20 and r["repeats"] == 3 for r in by.values())
    assert all(r["seconds_min"] <= r["seconds"] and r["gbps"] > 0 for r in by.values())
    # which is fastest (one hop, then the socket, then pickle + socket + unpickle) is a
    # measurement: benchmarks/topology.py and the chapter's figure, not a test under load
    assert len(experiments.get("p2p").plot(res).data) == 1
