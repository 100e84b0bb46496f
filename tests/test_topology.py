"""Chapter 02: topologies parsed from hwloc XML, the GPU-pair matrix, sysfs links, lanes math."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from hpclab import experiments
from hpclab.config import ConfigError
from hpclab.topology import gpu_pairs, hwloc, lanes, sysfs


def _counts(machine):
    return hwloc.load(machine).counts()


def test_dgx2_parse():
    topo = hwloc.load("dgx2")
    c = topo.counts()
    assert (c["package"], c["numa"], c["gpu"], c["nvswitch"], c["hostbridge"]) == (2, 2, 16, 12, 4)
    # 4 GPUs per host bridge: one top-level PLX switch and two below it carrying 2 GPUs each,
    # plus the NVSwitches' own switch on two of the host bridges: 3 + 4 + 4 + 3.
    assert c["switch"] == 14
    gpus = topo.of_kind("gpu")
    assert [g["numa_node"] for g in gpus] == [0] * 8 + [1] * 8
    assert all(g["link_gbps"] == pytest.approx(lanes.pcie_gbps(3, 16), rel=1e-4) for g in gpus)
    assert "V100" in gpus[0]["name"]
    # hwloc's NVLinkBandwidth matrix: each V100 has 6 links of 25 GB/s to the NVSwitches
    to_switches = [v for (a, b), v in topo.nvlink_gbps.items() if a == "GPU0"]
    assert len(to_switches) == 6 and set(to_switches) == {25.0}


def test_dgx2_pairs_match_nvidia_smi_levels():
    pairs = gpu_pairs.from_topology(hwloc.load("dgx2"))
    assert len(pairs) == 16 * 15 // 2
    by = {}
    for p in pairs:
        by[p["pcie_path"]] = by.get(p["pcie_path"], 0) + 1
    # under one 2nd-level switch: 8 pairs; same top switch: 16; same socket: 32; across: 8 x 8
    assert by == {"PIX": 8, "PXB": 16, "NODE": 32, "SYS": 64}
    assert all(p["link"] == "NV" and p["nvlink_gbps"] == 150.0 for p in pairs)
    labels, rows = gpu_pairs.matrix(pairs)
    assert labels[:3] == ["GPU0", "GPU1", "GPU2"] and rows[0][0] == "X"


def test_minsky_nvlink_pairs_and_sockets():
    topo = hwloc.load("power8-minsky")
    pairs = {(p["gpu_a"], p["gpu_b"]): p for p in gpu_pairs.from_topology(topo)}
    assert topo.counts()["gpu"] == 4
    assert pairs[("GPU0", "GPU1")]["link"] == "NV" and pairs[("GPU0", "GPU1")]["nvlink_gbps"] == 40
    assert pairs[("GPU0", "GPU2")]["link"] == "SYS"
    assert pairs[("GPU2", "GPU3")]["pcie_path"] == "NODE"  # two host bridges, one socket


def test_cluster_node_with_infiniband():
    topo = hwloc.load("xeon-2s-3gpu-ib")
    c = topo.counts()
    assert (c["gpu"], c["infiniband"], c["numa"], c["core"]) == (3, 1, 2, 12)
    assert c["display"] == 1  # the on-board VGA is not counted as a GPU
    pairs = {(p["gpu_a"], p["gpu_b"]): p["link"] for p in gpu_pairs.from_topology(topo)}
    assert pairs == {("GPU0", "GPU1"): "SYS", ("GPU0", "GPU2"): "SYS", ("GPU1", "GPU2"): "PHB"}
    ib = topo.of_kind("infiniband")[0]
    assert ib["numa_node"] == 0


def test_bad_xml_and_unknown_machine(tmp_path):
    with pytest.raises(ConfigError, match="neither a bundled machine"):
        hwloc.load("no-such-machine")
    bad = tmp_path / "x.xml"
    bad.write_text("<html></html>")
    with pytest.raises(ConfigError, match="not an hwloc topology"):
        hwloc.load(str(bad))
    bad.write_text("not xml")
    with pytest.raises(ConfigError, match="not an XML file"):
        hwloc.load(str(bad))


@pytest.mark.skipif(hwloc.lstopo_command() is None, reason="hwloc's lstopo is not installed")
def test_this_node_and_replay_agree_with_lstopo():
    import os

    topo = hwloc.load("this")
    # lstopo shows the processing units this process may use (a cgroup/Slurm cpuset) or all
    assert len(os.sched_getaffinity(0)) <= topo.counts()["pu"] <= os.cpu_count()
    text = hwloc.replay_console(hwloc.machine_path("dgx2"))
    assert text.count("nvml") == 16 and "Package L#1" in text


def test_sysfs_reads_links(tmp_path):
    def device(name, cls, vendor, **files):
        d = tmp_path / name
        d.mkdir()
        (d / "class").write_text(cls)
        (d / "vendor").write_text(vendor)
        (d / "device").write_text("0x1db8")
        for k, v in files.items():
            (d / k).write_text(v)

    device(
        "0000:34:00.0",
        "0x030200",
        "0x10de",
        numa_node="1",
        current_link_speed="8.0 GT/s PCIe",
        current_link_width="8",
        max_link_speed="8.0 GT/s PCIe",
        max_link_width="16",
    )
    device("0000:00:03.0", "0x020000", "0x1af4", numa_node="-1")
    devs = {d["pci_busid"]: d for d in sysfs.pci_devices(tmp_path)}
    gpu = devs["0000:34:00.0"]
    assert (gpu["kind"], gpu["numa_node"], gpu["link_gen"], gpu["link_width"]) == ("gpu", 1, 3, 8)
    assert devs["0000:00:03.0"]["numa_node"] is None and devs["0000:00:03.0"]["link_gen"] is None
    text = sysfs.describe(list(devs.values()))
    assert "virtual machine" in text and "0000:34:00.0" in text  # x8 in an x16 slot
    assert sysfs.gen_from_speed("16.0 GT/s PCIe") == 4 and sysfs.gen_from_speed("Unknown") is None


def test_nvidia_smi_text_parse():
    text = """\tGPU0\tGPU1\tGPU2\tNIC0\tCPU Affinity\tNUMA Affinity
GPU0\t X \tNV12\tSYS\tPXB\t0-31\t0
GPU1\tNV12\t X \tSYS\tPXB\t0-31\t0
GPU2\tSYS\tSYS\t X \tSYS\t32-63\t1
NIC0\tPXB\tPXB\tSYS\t X
"""
    pairs = {(p["gpu_a"], p["gpu_b"]): p for p in gpu_pairs.parse_nvidia_smi(text)}
    assert set(pairs) == {("GPU0", "GPU1"), ("GPU0", "GPU2"), ("GPU1", "GPU2")}
    assert pairs[("GPU0", "GPU1")]["link"] == "NV12"
    assert pairs[("GPU1", "GPU2")]["crosses_sockets"]


def test_live_pairs_say_why_without_a_driver():
    pairs, source, note = gpu_pairs.live_pairs()
    if not pairs:
        assert note and source == ""


# --- lanes -----------------------------------------------------------------------------------


def test_pcie_generations():
    assert lanes.pcie_gbps(1, 1) == pytest.approx(0.25)
    assert lanes.pcie_gbps(2, 1) == pytest.approx(0.5)  # the lecture's "x1 = 500 MB/s"
    assert lanes.pcie_gbps(3, 16) == pytest.approx(15.754, rel=1e-4)
    assert lanes.pcie_gbps(5, 16) == pytest.approx(63.015, rel=1e-4)
    assert lanes.pcie_gbps(6, 16) == pytest.approx(121.0, rel=1e-3)
    for gen in range(1, 6):  # each generation doubles (gen 3's new encoding makes up for 8 GT/s)
        ratio = lanes.pcie_gbps(gen + 1, 16) / lanes.pcie_gbps(gen, 16)
        assert 1.9 < ratio < 2.01 if gen != 2 else 1.9 < ratio < 2.0
    assert lanes.pcie_gbps(3, 16) == pytest.approx(16 * lanes.pcie_gbps(3, 1))


def test_lane_budget_scenarios():
    two = lanes.lane_budget(gpus=2, cpu_lanes=40, sockets=1)
    four = lanes.lane_budget(gpus=4, cpu_lanes=40, sockets=1)
    dual = lanes.lane_budget(gpus=4, cpu_lanes=40, sockets=2)
    switched = lanes.lane_budget(gpus=8, cpu_lanes=40, sockets=2, gpus_per_switch=2)
    assert two["fits_full_width"] and two["slot_width"] == 16
    assert not four["fits_full_width"] and four["slot_width"] == 8
    assert four["host_gbps_per_gpu"] == pytest.approx(two["host_gbps_per_gpu"] / 2)
    assert dual["fits_full_width"] and dual["cpu_lanes"] == 80
    assert switched["host_gbps_per_gpu"] == pytest.approx(lanes.pcie_gbps(3, 16) / 2)
    assert switched["pair_within_switch_gbps"] == pytest.approx(lanes.pcie_gbps(3, 16))


def test_lanes_experiment_and_cli():
    res = experiments.run("lanes", gen=4, width=8, gpus=4, sockets=1)
    whatif = next(r for r in res.records if r.get("link") == "what-if")
    assert whatif["host_gbps_per_gpu"] == pytest.approx(lanes.pcie_gbps(4, 8))
    refs = [r for r in res.records if r["tier"] == "reference"]
    assert {r["source"].split(" (")[0] for r in refs} == {"Nakayama 2017", "Mao 2015"}
    out = subprocess.run(
        [sys.executable, "-m", "hpclab.cli", "run", "lanes", "--gen", "9", "--json"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "gen=9" in out.stderr and "1..6" in out.stderr


def test_topology_cli_from_bundled_machine():
    out = subprocess.run(
        [sys.executable, "-m", "hpclab.cli", "run", "topology", "--from", "dgx2", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(out.stdout)
    summary = data["records"][0]
    assert (summary["gpus"], summary["numa_nodes"], summary["pcie_switches"]) == (16, 2, 14)
    objects = [r for r in data["records"] if r["record"] == "object"]
    assert all("kind" in r and "numa_node" in r for r in objects)
    assert all(r["tier"] == "reference" and "hwloc" in r["source"] for r in objects)


def test_topology_this_node_says_what_it_sees():
    res = experiments.run("topology")
    summary = res.records[0]
    assert summary["tier"] == "live" and summary["note"]
    assert summary["cores"] >= 1 and summary["numa_nodes"] >= 1
    fig = experiments.get("topology").plot(res)
    assert len(fig.data) >= 2
    if shutil.which("nvidia-smi") is None and not summary["gpus"]:
        assert "driver" in summary["note"] or "installed" in summary["note"]


def test_this_node_without_hwloc_falls_back_to_sysfs(monkeypatch, tmp_path):
    monkeypatch.setattr(hwloc, "lstopo_command", lambda: None)
    gpu = tmp_path / "0000:3b:00.0"
    gpu.mkdir()
    for name, text in {"class": "0x030200", "vendor": "0x10de", "numa_node": "0"}.items():
        (gpu / name).write_text(text)
    monkeypatch.setattr(sysfs, "SYSFS_PCI", tmp_path)
    monkeypatch.setattr(sysfs.pci_devices, "__defaults__", (tmp_path,))
    res = experiments.run("topology")
    summary = res.records[0]
    assert "lstopo is not installed" in summary["note"] and "sysfs alone" in summary["note"]
    assert summary["gpus"] == 1
    (obj,) = [r for r in res.records if r.get("kind") == "gpu"]
    assert obj["label"] == "GPU0" and obj["numa_node"] == 0
    assert len(experiments.get("topology").plot(res).data) >= 2
