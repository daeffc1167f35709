"""Grace-Blackwell trays (GB200/GB300) and non-zero PCI domains: the NUMA node a GPU hangs off
against NVML's GPU memory node, the `topo -m` that lists NUMA nodes, and NIC placement there.

The tray is the real GB200 `nvidia-smi topo -m` of the corpus (4 GPUs, GPU NUMA IDs 2/10/18/26,
CPU affinity 0-71 / 72-143, every GPU SYS to every NIC). GPU PCI addresses 0008:01:00.0,
0009:01:00.0, 0018:01:00.0, 0019:01:00.0 are a real GB200 tray's (NVIDIA/nccl issue #1769:
`MNNVL busId 0x801000 ... 0x1901000`). The NIC addresses and NUMA nodes below are NOT from a
capture: derived from the GB200 compute tray table of NVIDIA Mission Control's North-South
network deployment guide (left-bay OSFP mlx5_0/mlx5_1, right-bay mlx5_4/mlx5_5, bus ids printed
`00:03:00.0`, `02:03:00.0`, `10:03:00.0`, `12:03:00.0`), read as PCI domains 0000/0002 on
Grace 0 (NUMA node 0) and 0010/0012 on Grace 1 (node 1), as the GPUs' 0008-0009 / 0018-0019.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from corpus_util import CORPUS
from inventory_factory import by_subject, ib_hca, pcie_link as link, run_check, sources
from netdoctor.errors import ParseError, RulesError
from netdoctor.host.snapshot import open_snapshot
from netdoctor.inventory.build import build_inventory
from netdoctor.inventory.model import Gpu, Inventory, PciPathFunction, Topology
from netdoctor.inventory.queries import gpu_proximity, gpus_attached_by_c2c, nearest_gpu
from netdoctor.inventory.render import render_inventory_text
from netdoctor.parsers import parse_nvidia_smi_topo, parse_nvidia_smi_topo_matrix
from netdoctor.report.model import Status
from netdoctor.util import canonical_pci_address
from netdoctor_plugins.gpu_nic_affinity import gpu_nic_affinity
from netdoctor_plugins.pcie_link import pcie_link

GB200_TOPO = CORPUS / "nvidia-smi-topo" / "indexed-doc-61093033028__gb200-tray_topo-m_4gpu-8nic.txt"
GPU_ADDRESSES = ("0008:01:00.0", "0009:01:00.0", "0018:01:00.0", "0019:01:00.0")
MEMORY_NODES = (2, 10, 18, 26)
CPU_NODES = (0, 0, 1, 1)
NIC_ADDRESSES = {0: "0000:03:00.0", 1: "0002:03:00.0", 4: "0010:03:00.0", 5: "0012:03:00.0"}


# --- nvidia-smi topo -m ---------------------------------------------------------------------

def _topo(numa: str, gpu_numa_id: str) -> str:
    return ("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
            f"GPU0\t X \tNV18\t0-71\t{numa}\t\t{gpu_numa_id}\n"
            f"GPU1\tNV18\t X \t0-71\t{numa}\t\t{gpu_numa_id}\n")


def test_a_numa_list_names_the_cpu_node_only_below_the_gpu_numa_ids() -> None:
    listed = parse_nvidia_smi_topo_matrix(_topo("0,3-9", "2"))
    assert listed.topology.numa_affinity == {"GPU0": 0, "GPU1": 0}
    assert listed.numa_affinity_nodes["GPU0"] == (0, 3, 4, 5, 6, 7, 8, 9)
    # No GPU NUMA ID: a list (an x86 GPU close to two nodes) names no single node.
    unknown = parse_nvidia_smi_topo_matrix(_topo("0-1", "N/A"))
    assert unknown.topology.numa_affinity == {"GPU0": None, "GPU1": None}
    assert unknown.numa_affinity_nodes["GPU1"] == (0, 1)


@pytest.mark.parametrize("value", ["9-3", "0-99999999", "0,,1", "x"])
def test_a_numa_affinity_that_is_no_node_list_is_refused(value: str) -> None:
    with pytest.raises(ParseError, match="NUMA affinity"):
        parse_nvidia_smi_topo(_topo(value, "N/A"))


def test_the_command_echoed_above_the_matrix_is_not_data() -> None:
    topology = parse_nvidia_smi_topo(" nvidia-smi topo -m\n" + _topo("0", "N/A"))
    assert topology.gpus == ("GPU0", "GPU1") and topology.numa_affinity == {"GPU0": 0, "GPU1": 0}
    with pytest.raises(ParseError, match="matrix header"):
        parse_nvidia_smi_topo("nvidia-smi: command output follows\n" + _topo("0", "N/A"))


# --- the model: CPU node against NVML's memory node --------------------------------------------

def _tray_snapshot(root: Path, *, sysfs_numa: tuple[int, ...] | None = CPU_NODES, topo: bool = True,
                   nvml_numa: tuple[int, ...] = MEMORY_NODES) -> Path:
    root.mkdir(parents=True)
    (root / "snapshot.json").write_text(json.dumps(
        {"format": "netdoctor.snapshot/1", "host": "gb200-tray12", "captured_at": "2026-11-21T22:40:00Z",
         "netdoctor": "0.1.0"}))
    (root / "commands").mkdir()
    if topo:
        (root / "commands" / "nvidia-smi-topo-m.status").write_text("0\n")
        (root / "commands" / "nvidia-smi-topo-m.out").write_text(GB200_TOPO.read_text())
    # NVML pads the domain to 8 digits: `00000008:01:00.0`.
    (root / "nvml.json").write_text(json.dumps({"driver_version": "580.105.08", "device_count": 4, "gpus": [
        {"index": index, "name": "NVIDIA GB200", "pci_bus_id": f"0000{address.upper()}", "numa_node": node}
        for index, (address, node) in enumerate(zip(GPU_ADDRESSES, nvml_numa, strict=True))]}))
    if sysfs_numa is not None:
        for address, node in zip(GPU_ADDRESSES, sysfs_numa, strict=True):
            function = root / "sys" / "bus" / "pci" / "devices" / address
            function.mkdir(parents=True)
            (function / "numa_node").write_text(f"{node}\n")
    return root


def _build(root: Path) -> Inventory:
    with open_snapshot(root) as source:
        return build_inventory(source)


@pytest.mark.parametrize("sysfs_numa", [CPU_NODES, None], ids=["sysfs", "topo-only"])
def test_gb200_gpu_numa_is_the_cpu_node_and_nvml_keeps_the_memory_node(tmp_path: Path, sysfs_numa) -> None:
    inventory = _build(_tray_snapshot(tmp_path / "snap", sysfs_numa=sysfs_numa))
    assert [gpu.pci_address for gpu in inventory.gpus] == list(GPU_ADDRESSES)
    assert [gpu.numa_node for gpu in inventory.gpus] == list(CPU_NODES)
    assert [gpu.memory_numa_node for gpu in inventory.gpus] == list(MEMORY_NODES)
    assert not [conflict for conflict in inventory.conflicts if conflict.fact == "numa_node"]
    assert gpus_attached_by_c2c(inventory)
    text = render_inventory_text(inventory)
    assert "0 (mem 2)" in text and "1 (mem 26)" in text


def test_nvml_alone_keeps_its_node(tmp_path: Path) -> None:
    # Nothing names another node: NVML's value is all there is (and no memory node is claimed).
    inventory = _build(_tray_snapshot(tmp_path / "snap", sysfs_numa=None, topo=False))
    assert [(gpu.numa_node, gpu.memory_numa_node) for gpu in inventory.gpus] == [(node, None) for node in MEMORY_NODES]


def test_a_cpu_node_that_nvml_and_the_kernel_disagree_on_stays_a_conflict(tmp_path: Path) -> None:
    # x86-like disagreement: NVML's node is one the kernel gives other GPUs: not a memory node.
    inventory = _build(_tray_snapshot(tmp_path / "snap", topo=False, nvml_numa=(1, 0, 1, 1)))
    assert [(gpu.numa_node, gpu.memory_numa_node) for gpu in inventory.gpus] == [(1, None), (0, None), (1, None),
                                                                                   (1, None)]
    conflicts = [(c.subject, c.values, c.chosen) for c in inventory.conflicts if c.fact == "numa_node"]
    assert conflicts == [("GPU0", {"nvml": 1, "sysfs": 0}, "nvml")]
    assert not gpus_attached_by_c2c(inventory)


def test_nvml_and_sysfs_agreeing_on_x86_is_no_memory_node(tmp_path: Path) -> None:
    inventory = _build(_tray_snapshot(tmp_path / "snap", topo=False, nvml_numa=CPU_NODES))
    assert [(gpu.numa_node, gpu.memory_numa_node) for gpu in inventory.gpus] == [(node, None) for node in CPU_NODES]
    assert not inventory.conflicts


def test_non_zero_pci_domains_are_canonical() -> None:
    assert canonical_pci_address("00000008:06:00.0") == "0008:06:00.0"
    assert canonical_pci_address("00000018:01:00.0") == canonical_pci_address("0018:01:00.0") == "0018:01:00.0"
    assert canonical_pci_address("0001:1A:00.0") == "0001:1a:00.0"


# --- gpu-nic-affinity on a tray ---------------------------------------------------------------

def gb200_tray(*, rails: tuple[int, ...] = (0, 1, 4, 5), memory_nodes: bool = True) -> Inventory:
    topology = parse_nvidia_smi_topo(GB200_TOPO.read_text())
    gpus = [Gpu(index, name="NVIDIA GB200", pci_address=address, numa_node=node,
                memory_numa_node=memory if memory_nodes else None, sources=("nvml",))
            for index, (address, node, memory) in enumerate(zip(GPU_ADDRESSES, CPU_NODES, MEMORY_NODES, strict=True))]
    hcas = [ib_hca(index, address=NIC_ADDRESSES[index], numa_node=0 if index < 4 else 1) for index in rails]
    return Inventory(host="gb200-tray12", captured_at="2026-11-21T22:40:00Z", gpus=gpus, hcas=hcas,
                     topology=topology, sources=sources("sysfs", "nvml", "ibstat", "nvidia-smi-topo-m"))


def affinity(inventory: Inventory, **overrides: object) -> dict[str, list]:
    return by_subject(run_check(gpu_nic_affinity, "gpu-nic-affinity", inventory, overrides=overrides))


def test_healthy_gb200_tray_passes_by_numa_node() -> None:
    findings = affinity(gb200_tray(), one_rail_per_gpu=True)
    assert {subject: [str(f.status) for f in items] for subject, items in findings.items()} == {
        f"GPU{index}": ["pass"] for index in range(4)}
    gpu2 = findings["GPU2"][0]
    assert gpu2.summary == "rail NIC mlx5_4 (NODE), NUMA node 1"
    assert gpu2.evidence["placement_by"] == "numa" and gpu2.evidence["memory_numa_node"] == 18
    assert gpu2.evidence["levels"] == {"mlx5_4": "NODE", "mlx5_5": "NODE", "mlx5_0": "SYS", "mlx5_1": "SYS"}
    assert [findings[f"GPU{index}"][0].evidence["rail_nic"] for index in range(4)] == [
        "mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5"]


def test_by_pcie_distance_the_same_tray_fails_every_gpu() -> None:
    # The false alarm of issue 23: topo -m says SYS from every GPU to every NIC on Grace.
    findings = affinity(gb200_tray(), placement_by="pcie")
    assert all(items[0].status is Status.FAIL and items[0].rule == "cross_socket_severity"
               for items in findings.values())


def test_a_tray_whose_socket_1_nics_are_gone_fails_gpus_2_and_3() -> None:
    findings = affinity(gb200_tray(rails=(0, 1)))
    assert [findings[f"GPU{index}"][0].status for index in range(4)] == [Status.PASS, Status.PASS,
                                                                          Status.FAIL, Status.FAIL]
    assert findings["GPU3"][0].summary == "nearest compute NIC mlx5_0, mlx5_1 (SYS) is across the CPU socket"


def test_a_pack_asks_numa_where_nvml_gave_no_memory_node() -> None:
    tray = gb200_tray(memory_nodes=False)
    assert all(items[0].status is Status.FAIL for items in affinity(tray).values())   # auto: pcie
    findings = affinity(tray, placement_by="numa", expected_level="PXB")
    # A NUMA node tells nothing closer than NODE: a pack's PXB is read as NODE there.
    assert all(items[0].status is Status.PASS and items[0].evidence["expected_level"] == "NODE"
               for items in findings.values())


def test_unknown_nic_numa_nodes_on_a_tray_are_unknown_not_failed() -> None:
    tray = gb200_tray()
    for hca in tray.hcas:
        hca.numa_node = None
    findings = affinity(tray)
    assert all(items[0].status is Status.UNKNOWN for items in findings.values())


def test_placement_by_must_be_known() -> None:
    with pytest.raises(RulesError, match="placement_by"):
        affinity(gb200_tray(), placement_by="guess")


def test_queries_place_a_tray_nic_by_numa_node() -> None:
    tray = gb200_tray()
    proximity = gpu_proximity(tray, tray.hca("mlx5_4"))
    assert proximity.near is True and proximity.basis.startswith("NUMA node 1 shared with GPU2")
    assert nearest_gpu(tray, tray.hca("mlx5_5"))[0].label == "GPU2"
    # On x86 the same all-SYS matrix still says "not near" and the first SYS GPU.
    x86 = gb200_tray(memory_nodes=False)
    assert gpu_proximity(x86, x86.hca("mlx5_4")).near is False
    assert nearest_gpu(x86, x86.hca("mlx5_5")) == (x86.gpus[0], "SYS in nvidia-smi topo -m")


# --- pcie-link: a switch uplink capped by its root port -----------------------------------------

ROOT, UP, DOWN, CX8 = "0000:00:01.0", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0"


def switch_node(*, root_gen: int | None = 5, uplink_gen: int = 5, root_width: int = 16, uplink_width: int = 16) -> Inventory:
    """A ConnectX-8 (Gen6) below a Gen6 switch whose upstream port trained at `uplink_gen` to a root port
    of `root_gen` (None: its link not read)."""
    tree = {
        ROOT: PciPathFunction(ROOT, None, port_type="root_port",
                              link=link(ROOT, root_gen, root_width, max_gen=root_gen) if root_gen else None),
        UP: PciPathFunction(UP, ROOT, port_type="upstream_port", link=link(UP, uplink_gen, uplink_width, max_gen=6)),
        DOWN: PciPathFunction(DOWN, UP, port_type="downstream_port", link=link(DOWN, 6, max_gen=6)),
        CX8: PciPathFunction(CX8, DOWN, port_type="endpoint", link=link(CX8, 6, max_gen=6)),
    }
    hca = replace(ib_hca(0, address=CX8), ca_type="MT4131", model="ConnectX-8")
    return Inventory(host="b300-01", captured_at="2026-11-21T22:40:00Z", hcas=[hca], pcie={CX8: tree[CX8].link},
                     pci_tree=tree, sources=sources("sysfs"))


def uplink(inventory: Inventory):
    [finding] = by_subject(run_check(pcie_link, "pcie-link", inventory))[UP]
    return finding


def test_gen6_switch_on_a_gen5_root_port_at_gen5_passes() -> None:
    finding = uplink(switch_node())
    assert finding.status is Status.PASS
    assert finding.summary == ("PCIe switch uplink 32 GT/s Gen5 x16 (max 64 GT/s Gen6 x16) for mlx5_0; at the most "
                               f"the link can train to: the root port {ROOT} above it tops out at Gen5")
    assert (finding.evidence["expected_gen"], finding.evidence["parent_max_gen"]) == (5, 5)
    # the CX-8 itself runs at its own maximum below the Gen6 downstream port
    assert by_subject(run_check(pcie_link, "pcie-link", switch_node()))[CX8][0].status is Status.PASS


def test_the_same_uplink_below_the_root_ports_maximum_warns_naming_the_cap() -> None:
    finding = uplink(switch_node(uplink_gen=4))
    assert finding.status is Status.WARN and finding.rule == "uplink_low_speed_severity"
    assert finding.summary == (f"PCIe switch uplink {UP} runs at 16 GT/s Gen4 x16, below Gen5, the most it can "
                               f"train to (the root port {ROOT} above it tops out at Gen5) (mlx5_0 behind it)")


def test_without_the_root_ports_link_the_switch_maximum_is_the_measure() -> None:
    finding = uplink(switch_node(root_gen=None))
    assert finding.status is Status.WARN
    assert finding.summary.endswith("below its maximum 64 GT/s Gen6 x16 (mlx5_0 behind it)")


def test_a_root_port_narrower_than_the_switch_still_fails_the_width() -> None:
    # Width is not capped by the parent: a x8 root port under a x16 switch is a bifurcation setting.
    finding = uplink(switch_node(root_width=8, uplink_width=8))
    assert finding.status is Status.FAIL and finding.rule == "low_width_severity"


def test_topology_of_the_fixture_stays_a_topology() -> None:
    assert isinstance(parse_nvidia_smi_topo(GB200_TOPO.read_text()), Topology)
