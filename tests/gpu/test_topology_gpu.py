"""Chapter 02 on a GPU: pinned vs pageable copies, both directions, the link's spec, the
overlapped loop's timeline, P2P pairs, and the non-blocking D2H trap."""

from __future__ import annotations

import pytest
import torch

from hpclab import experiments
from hpclab.topology import gpu_pairs

pytestmark = pytest.mark.gpu


def _live(result):
    return [r for r in result.records if r.get("tier") == "live" and r.get("gbps")]


def test_pinned_h2d_beats_pageable_and_stays_below_the_link():
    res = experiments.run(
        "host-copy",
        device="cuda",
        sizes_kib=(262144,),
        memory=("pageable", "pinned"),
        direction=("h2d", "d2h", "both"),
        repeat=5,
    )
    by = {(r["memory"], r["direction"]): r for r in _live(res)}
    assert by[("pinned", "h2d")]["gbps"] > by[("pageable", "h2d")]["gbps"]
    pinned = by[("pinned", "h2d")]
    if pinned.get("spec_gbps"):  # sysfs showed the link: no copy beats its spec
        assert 0.3 < pinned["spec_fraction"] < 1.02
    # full duplex: both directions at once move more bytes per second than one alone
    assert by[("pinned", "both")]["gbps"] > 1.2 * pinned["gbps"]


def test_pinned_memory_is_available_with_a_gpu():
    from hpclab.topology.copies import pinned_available

    assert pinned_available() == (True, "")


def test_overlapped_loop_is_faster_and_its_timeline_overlaps():
    res = experiments.run("overlap", device="cuda", steps=6, batch_mib=256, compute_n=4096)
    totals = {
        r["mode"]: r["seconds"]
        for r in res.records
        if r["record"] == "total" and r["tier"] == "live"
    }
    assert totals["overlapped"] < 0.9 * totals["serial"]
    events = [r for r in res.records if r["record"] == "event" and r["mode"] == "overlapped"]
    copies = {e["step"]: e for e in events if e["op"] == "copy"}
    computes = {e["step"]: e for e in events if e["op"] == "compute"}
    # copy of step 1 starts before compute of step 0 ends: they overlap in time
    assert copies[1]["start_s"] < computes[0]["end_s"]
    assert all(computes[i]["start_s"] >= copies[i]["end_s"] - 1e-6 for i in computes)


def test_non_blocking_d2h_must_be_synchronised_before_reading():
    src = torch.full((64 * 2**20,), 7, dtype=torch.uint8, device="cuda")
    dst = torch.zeros(src.numel(), dtype=torch.uint8).pin_memory()
    torch.cuda._sleep(50_000_000)  # keep the stream busy so the copy cannot have finished
    dst.copy_(src, non_blocking=True)
    early = int(dst[-1])
    torch.cuda.synchronize()
    assert early == 0 and int(dst[-1]) == 7


def test_live_pairs_and_p2p_matrix():
    pairs, source, note = gpu_pairs.live_pairs()
    n = torch.cuda.device_count()
    if n < 2:
        assert not pairs
        res = experiments.run("p2p")
        assert "two GPUs" in res.records[0]["note"]
        return
    assert len(pairs) == n * (n - 1) // 2 and source
    res = experiments.run("p2p", size_mib=64, repeat=3)
    rows = [r for r in res.records if r.get("record") == "copy"]
    assert len(rows) == 2 * n * (n - 1) and all(r["gbps"] > 0 for r in rows)
