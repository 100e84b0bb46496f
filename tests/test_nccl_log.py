"""Chapter 06: reading a real NCCL_DEBUG=INFO log (bundled, NVIDIA/nccl#1189) and other formats."""

from __future__ import annotations

from hpclab.ddp.nccl_log import annotate, init_log, summary, transport


def test_the_bundled_log_is_a_real_one_with_its_source():
    text = init_log()
    header, body = text.split("\n\n", 1)
    assert "https://github.com/NVIDIA/nccl/issues/1189" in header and "2025-04-02" in header
    assert "quoted as published" in header
    lines = body.splitlines()
    assert sum(" NCCL INFO " in ln for ln in lines) >= 40  # a few dozen real lines
    assert all(ln.startswith(("H20-GPU-05:", "H20-GPU-06:", "#", "[...]")) for ln in lines)


def test_summary_finds_what_the_job_built():
    s = summary(init_log())
    assert (s["nranks"], s["nodes"], s["hosts"]) == (4, 2, ["H20-GPU-05", "H20-GPU-06"])
    assert s["init_complete"] == [0, 1, 2, 3]
    # channels: 8 for collectives, no in-switch reduction, and a tree on each of the 8
    assert (s["coll_channels"], s["collnet_channels"], s["nvls_channels"]) == (8, 0, 0)
    assert s["p2p_channels"] == 8 and s["tree_channels"] == 8
    # rings: even channels 2 -> 0 -> 1 -> 3, odd ones the other way round
    assert s["ring_channels"] == [2, 3, 4, 5, 6, 7]
    assert s["rings"][6] == {0: (2, 1), 1: (0, 3)} and s["rings"][7] == {0: (1, 2), 1: (3, 0)}
    # transports: NVLink/PCIe peer-to-peer inside a node, InfiniBand with GPUDirect RDMA across
    assert s["hops"] == {"NET/IB": 9, "P2P": 5}
    assert s["nics"] == [2, 3] and s["gpudirect_rdma"] is True
    assert s["env"] == {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,ENV,GRAPH",
        "NCCL_PXN_DISABLE": "1",
    }
    assert s["version"] is None  # the comment's log names no release: nothing invented


def test_annotate_explains_one_line_of_each_kind():
    rows = {r["kind"]: r for r in annotate(init_log())}
    assert list(rows) == [
        "bootstrap", "ring", "trees", "shape", "hop NET/IB", "hop P2P", "channels", "init",
    ]  # fmt: skip
    assert rows["ring"]["line"] == "Ring 02 : 2 -> 0 -> 1"
    assert rows["ring"]["says"] == "ring channel 2: rank 0 receives from 2, sends to 1"
    assert "in tree 1 rank 1 has children [0, 3] and parent -1" in rows["trees"]["says"]
    assert "NIC 3, GPUDirect RDMA" in rows["hop NET/IB"]["says"]
    assert rows["hop P2P"]["line"] == "Channel 00/0 : 3[1] -> 2[0] via P2P/CUMEM"
    assert rows["channels"]["says"].startswith("8 channels for collectives")
    assert "ibs1130f0" in rows["bootstrap"]["says"]


def test_other_formats_of_the_same_lines():
    # line shapes from other NCCL releases (NVIDIA/nccl issues #952, #1291, #429)
    text = "\n".join(
        [
            "NCCL version 2.21.5+cuda12.4",
            "gh1:1:2 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to bond0",
            "gh1:1:2 [0] NCCL INFO Channel 00/04 :    0   1   2",
            "gh2:3:4 [7] NCCL INFO Channel 03/0 : 15[7] -> 6[6] [send] via NET/Socket/3",
            "gh2:3:4 [1] NCCL INFO Channel 00 : 9[1b000] -> 11[3e000] via P2P/direct pointer",
            "gh2:3:4 [5] NCCL INFO 6 coll channels, 8 p2p channels, 1 p2p channels per peer",
        ]
    )
    s = summary(text)
    assert s["version"] == "2.21.5+cuda12.4" and s["env"] == {"NCCL_SOCKET_IFNAME": "bond0"}
    assert s["rings"][0] == {0: (2, 1), 1: (0, 2), 2: (1, 0)}  # the whole ring order
    assert s["hops"] == {"NET/Socket": 1, "P2P": 1} and s["nics"] == [3]
    assert not s["gpudirect_rdma"]
    assert (s["coll_channels"], s["collnet_channels"], s["p2p_channels"]) == (6, None, 8)
    assert (s["nodes"], s["hosts"]) == (2, ["gh1", "gh2"])  # no nNodes line: counted hosts
    assert transport("NET/IBext_v8/0/GDRDMA") == ("NET/IBext_v8", 0, True)
    assert transport("SHM/direct/direct") == ("SHM", None, False)
    assert summary("no NCCL here")["hops"] == {} and annotate("no NCCL here") == []
