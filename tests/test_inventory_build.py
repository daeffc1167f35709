"""The inventory builder: each source counts on its own, disagreements are kept, joins are right."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from netdoctor.host.snapshot import open_snapshot
from netdoctor.inventory.build import build_inventory
from netdoctor.inventory.model import LinkLayer, PhysState, PortState, SourceState
from netdoctor.inventory.render import inventory_to_json, render_inventory_text

NODES = Path(__file__).parent / "fixtures" / "nodes"
from corpus_util import CORPUS



def _snapshot(root: Path, commands: dict[str, tuple[str, str]] | None = None, host: str = "node001") -> Path:
    """A minimal snapshot: snapshot.json plus recorded commands {NAME: (status, stdout)}."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "snapshot.json").write_text(json.dumps(
        {"format": "netdoctor.snapshot/1", "host": host, "captured_at": "2026-11-21T22:40:00Z", "netdoctor": "0.1.0"}))
    (root / "commands").mkdir(exist_ok=True)
    for name, (status, stdout) in (commands or {}).items():
        (root / "commands" / f"{name}.status").write_text(status + "\n")
        (root / "commands" / f"{name}.out").write_text(stdout)
    return root


def _build(path: Path):
    with open_snapshot(path) as source:
        return build_inventory(source)


def test_ibstat_alone_names_hcas_and_ports(tmp_path: Path) -> None:
    text = (CORPUS / "ibstat" / "leptonai-gpud__ibstat.47.0.h100.all.active.2.txt").read_text()
    inventory = _build(_snapshot(tmp_path / "snap", {"ibstat": ("0", text)}))
    names = [hca.name for hca in inventory.hcas]
    assert "mlx5_bond_0" in names and "mlx5_0" in names
    assert len(inventory.ports) == len(names) == 9
    port = inventory.port("mlx5_0:1")
    assert port.state is PortState.ACTIVE and port.phys_state is PhysState.LINK_UP
    assert port.rate.gbps == 400 and port.link_layer is LinkLayer.INFINIBAND
    assert inventory.hca("mlx5_0").model == "ConnectX-7"
    assert inventory.port("mlx5_bond_0:1").link_layer is LinkLayer.ETHERNET
    assert inventory.source("sysfs").state is SourceState.MISSING
    assert inventory.source("ibstat").state is SourceState.OK
    text_view = render_inventory_text(inventory)
    assert "mlx5_bond_0" in text_view and "no NVIDIA GPUs" in text_view


def test_topology_alone_names_gpus_and_nics(tmp_path: Path) -> None:
    text = (CORPUS / "nvidia-smi-topo" / "dw-flyingw-GLM-5.2-FP8__topo.txt").read_text()
    inventory = _build(_snapshot(tmp_path / "snap", {"nvidia-smi-topo-m": ("0", text)}))
    assert [gpu.label for gpu in inventory.gpus] == [f"GPU{i}" for i in range(8)]
    assert inventory.gpus[4].numa_node == 1 and inventory.gpus[4].cpu_affinity == "64-127,192-255"
    assert len(inventory.hcas) == 10                       # the NICs of the legend
    assert inventory.topology.link("GPU3", "NIC0") == "PIX"
    assert inventory.source("nvml").state is SourceState.MISSING


def test_ibstat_with_trailing_ibpanic_is_used_but_flagged(tmp_path: Path) -> None:
    text = (CORPUS / "ibstat" / "leptonai-gpud__ibstat.39.0.a100.failed.ibpanic.exit-255.0.txt").read_text()
    inventory = _build(_snapshot(tmp_path / "snap", {"ibstat": ("255", text)}))
    assert len(inventory.hcas) == 8
    assert inventory.source("ibstat").state is SourceState.ERROR
    assert "255" in inventory.source("ibstat").reason()


def test_sources_that_disagree_are_reported_not_hidden(tmp_path: Path) -> None:
    snapshot = tmp_path / "snap"
    shutil.copytree(NODES / "dgx-h100", snapshot, symlinks=True)
    # sysfs still says NDR; ibstat now says the port runs at 200.
    ibstat = snapshot / "commands" / "ibstat.out"
    text = ibstat.read_text()
    block_start = text.index("CA 'mlx5_5'")
    rate_at = text.index("Rate: 400", block_start)
    ibstat.write_text(text[:rate_at] + "Rate: 200" + text[rate_at + len("Rate: 400"):])
    inventory = _build(snapshot)
    conflicts = [c for c in inventory.conflicts if c.subject == "mlx5_5:1" and c.fact == "rate"]
    assert len(conflicts) == 1
    assert conflicts[0].chosen == "sysfs"
    assert "ibstat" in conflicts[0].values
    assert inventory.port("mlx5_5:1").rate.gbps == 400
    assert "Sources disagree" in render_inventory_text(inventory)


def test_healthy_dgx_inventory_joins_every_source() -> None:
    inventory = _build(NODES / "dgx-h100")
    assert inventory.conflicts == []
    assert len(inventory.gpus) == 8 and len(inventory.hcas) == 10
    assert [hca.name for hca in inventory.hcas][:3] == ["mlx5_0", "mlx5_1", "mlx5_2"]   # natural order
    gpu0 = inventory.gpus[0]
    assert gpu0.name == "NVIDIA H100 80GB HBM3" and gpu0.nvlink_active == 18
    assert gpu0.pci_address in inventory.pcie
    nic0 = inventory.topology.nic_names["NIC0"]
    hca = inventory.hca(nic0)
    assert hca.numa_node == gpu0.numa_node
    port = next(iter(hca.ports.values()))
    # A port knows its HCA, PCI address, NUMA node (through the HCA) and netdev.
    assert port.netdev and inventory.netdev(port.netdev).rdma_port == port.name
    assert port.counters_source == "sysfs" and "symbol_error" in port.counters
    assert port.active_mtu == 4096 and port.pkeys
    assert inventory.peer_memory.nvidia_peermem is True
    # Every source the fixture recorded answered; sources added after it was generated (issue 23's
    # nvidia-smi-q, nvidia-imex-ctl-N) read as not recorded, never as failed.
    assert all(status.state is SourceState.OK or (status.state is SourceState.MISSING and status.detail.endswith(
        "was not recorded in this snapshot")) for name, status in inventory.sources.items())
    assert inventory.source("ibstat").state is SourceState.OK and inventory.source("nvml").state is SourceState.OK
    data = inventory_to_json(inventory)
    json.dumps(data)   # JSON-ready
    assert data["topology"]["links"]["GPU0"]["NIC0"] == "PIX"


def test_node_without_gpus_or_rdma_says_what_it_did_not_find(tmp_path: Path) -> None:
    inventory = _build(_snapshot(tmp_path / "snap"))
    assert inventory.gpus == [] and inventory.hcas == []
    text = render_inventory_text(inventory)
    assert "no NVIDIA GPUs" in text and "no RDMA devices" in text


def test_gpud_sysfs_tree_without_device_links(tmp_path: Path) -> None:
    snapshot = _snapshot(tmp_path / "snap")
    shutil.copytree(CORPUS / "sysfs" / "leptonai-gpud__sys-class-infiniband-h100.0", snapshot / "sys" / "class" / "infiniband")
    inventory = _build(snapshot)
    assert len(inventory.hcas) == 9
    bond = inventory.port("mlx5_bond_0:1")
    assert bond.rate.gbps == 200 and bond.rate.width == 2 and bond.rate.speed == "NDR"
    assert bond.link_layer is LinkLayer.ETHERNET
    assert inventory.port("mlx5_1:1").counters["link_downed"] == 255
    assert inventory.hca("mlx5_0").pci_address is None   # no device link in this tree: unknown, not invented


def test_live_capture_reproduces_the_inventory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A live-like run (fixture sysfs as the live root, fake tools on PATH) captured and re-read is identical."""
    from netdoctor.host.live import LiveSource
    from netdoctor.host.snapshot import write_snapshot

    from fake_tools import make_fake_tools, path_with

    fixture = NODES / "dgx-h100"
    bin_dir = make_fake_tools(fixture, tmp_path / "bin")
    monkeypatch.setenv("PATH", path_with(bin_dir))
    live = LiveSource(sys_root=str(fixture / "sys"), record=True, tool_timeout_s=10.0)
    live_inventory = build_inventory(live)
    write_snapshot(live.recording, tmp_path / "capture.tar.gz", host=live.host, captured_at=live.captured_at,
                   boot_id=live.boot_id, version="test")
    captured = _build(tmp_path / "capture.tar.gz")
    live_json, captured_json = inventory_to_json(live_inventory), inventory_to_json(captured)
    for data in (live_json, captured_json):
        data.pop("sources")   # durations differ between a live run and its replay
    assert captured_json == live_json
    assert len(captured.hcas) == 10 and captured.hcas[0].ports[1].counters


def test_merge_keeps_the_first_value_and_records_each_difference(tmp_path: Path) -> None:
    from netdoctor.inventory.merge import Draft
    from netdoctor.inventory.model import Hca, LinkRate, Port

    with open_snapshot(_snapshot(tmp_path / "snap")) as source:
        draft = Draft(source)
    hca = Hca(name="mlx5_0", firmware="28.39.1002", sources=("sysfs",))
    draft.merge(hca, {"firmware": "28.40.1000", "board_id": "MT_0000000838", "node_guid": None}, "ibstat", "mlx5_0")
    assert (hca.firmware, hca.board_id, hca.node_guid) == ("28.39.1002", "MT_0000000838", None)
    (conflict,) = draft.inventory.conflicts
    assert (conflict.subject, conflict.fact, conflict.values, conflict.chosen) == (
        "mlx5_0", "firmware", {"sysfs": "28.39.1002", "ibstat": "28.40.1000"}, "sysfs")
    # A rate is combined: facts the first source lacked fill in; only the total or width conflicts.
    port = Port(hca="mlx5_0", number=1, rate=LinkRate(gbps=400.0), sources=("sysfs",))
    draft.merge(port, {"rate": LinkRate(gbps=400.0, width=4, speed="NDR", lane_gbps=100.0)}, "ibv_devinfo-v", "mlx5_0:1")
    assert port.rate == LinkRate(gbps=400.0, width=4, speed="NDR", lane_gbps=100.0) and len(draft.inventory.conflicts) == 1
    draft.merge(port, {"rate": LinkRate(gbps=200.0, width=4)}, "ibstat", "mlx5_0:1")
    assert port.rate.gbps == 400.0 and draft.inventory.conflicts[-1].values == {"sysfs": port.rate.describe(),
                                                                                  "ibstat": LinkRate(gbps=200.0, width=4).describe()}


def test_nvml_health_fields_are_joined_and_garbage_stays_unknown(tmp_path: Path) -> None:
    """CONTRACT 7.2: memory, recovery action, clock reasons, utilization, PCIe replays and NVML's
    device count reach the model; a value of the wrong type or range is None, never a crash."""
    root = _snapshot(tmp_path / "snap")
    health = {"memory": {"ecc_mode": "enabled", "volatile_uncorrected": 1, "aggregate_uncorrected": 3,
                         "remapped_rows": {"correctable": 0, "uncorrectable": 1, "pending": True, "failure": False},
                         "retired_pages": None},
              "recovery_action": "gpu_reset", "clocks_event_reasons": ["gpu_idle", "hw_slowdown"],
              "utilization_gpu": 12, "pcie_replay_counter": 4}
    garbage = {"memory": {"ecc_mode": "maybe", "volatile_uncorrected": -1, "aggregate_uncorrected": "7",
                          "remapped_rows": [1, 2], "retired_pages": {"sbe": True, "dbe": 2, "pending": "no"}},
               "recovery_action": 2, "clocks_event_reasons": "hw_slowdown", "utilization_gpu": 140,
               "pcie_replay_counter": -3}
    (root / "nvml.json").write_text(json.dumps({"driver_version": "580.95.05", "device_count": 8, "gpus": [
        {"index": 0, "name": "NVIDIA H100 80GB HBM3", "pci_bus_id": "00000000:18:00.0", **health},
        {"index": 1, "name": "NVIDIA H100 80GB HBM3", "pci_bus_id": "00000000:2A:00.0", **garbage},
        {"index": 2, "name": "NVIDIA H100 80GB HBM3", "pci_bus_id": "00000000:3A:00.0"}]}))
    inventory = _build(root)
    assert inventory.nvml_device_count == 8
    sick, odd, old = inventory.gpus
    assert sick.memory is not None and (sick.memory.volatile_uncorrected, sick.memory.aggregate_uncorrected) == (1, 3)
    assert (sick.memory.remapped_uncorrectable, sick.memory.remap_pending, sick.memory.remap_failure) == (1, True, False)
    assert sick.memory.retired_dbe is None and sick.recovery_action == "gpu_reset"
    assert sick.clocks_event_reasons == ("gpu_idle", "hw_slowdown")
    assert (sick.utilization_gpu, sick.pcie_replay_counter) == (12, 4)
    assert odd.memory is not None and odd.memory.ecc_mode is None and odd.memory.volatile_uncorrected is None
    assert odd.memory.aggregate_uncorrected is None and odd.memory.remap_pending is None
    assert (odd.memory.retired_sbe, odd.memory.retired_dbe, odd.memory.retired_pending) == (None, 2, None)
    assert (odd.recovery_action, odd.clocks_event_reasons, odd.utilization_gpu, odd.pcie_replay_counter) == (
        None, None, None, None)
    assert old.memory is None and old.recovery_action is None
