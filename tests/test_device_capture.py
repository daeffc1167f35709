"""The capture netdoctor took of a real GPU machine (2x NVIDIA H200, device tool) reads back right.

Captured by tests/data/device/discover-and-capture.sh: `netdoctor capture` on the live node.
That machine has two H200 joined by 18 NVLinks, no RDMA device and no peermem module.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from netdoctor.host.snapshot import open_snapshot
from netdoctor.inventory.build import build_inventory
from netdoctor.inventory.model import SourceState
from netdoctor.report.model import Grade, Status
from netdoctor.run import CheckOptions, run_check

CAPTURE = Path(__file__).parent / "data" / "device" / "nvidia-h200-x2" / "capture.tar.gz"
H100_CAPTURE = Path(__file__).parent / "data" / "device" / "nvidia-h100-x1" / "capture.tar.gz"


def test_real_h200_capture_inventory() -> None:
    with open_snapshot(CAPTURE) as source:
        inventory = build_inventory(source)
    assert [gpu.name for gpu in inventory.gpus] == ["NVIDIA H200", "NVIDIA H200"]
    assert inventory.driver_version == "580.159.04"
    for gpu in inventory.gpus:
        assert gpu.nvlink_active == gpu.nvlink_total == 18
        assert gpu.nvlink_version == 6   # NVML enum for NVLink 4.0 (Hopper)
        assert gpu.pcie is not None and gpu.pcie.max_gen == 5 and gpu.pcie.max_width == 16
        assert gpu.pci_address in inventory.pcie   # sysfs view of the same link
    assert inventory.topology.link("GPU0", "GPU1") == "NV18"
    assert inventory.topology.nics == ()
    assert inventory.hcas == []                              # no RDMA device
    assert inventory.source("sysfs").state is SourceState.OK  # /sys/class/infiniband exists, empty
    assert inventory.source("ibstat").state is SourceState.MISSING
    assert inventory.peer_memory.nvidia_peermem is False and inventory.peer_memory.nv_peer_mem is False
    assert {gpu.dmabuf_supported for gpu in inventory.gpus} == {True}
    # The PCI bus shows the same two GPUs NVML reports (device id 0x2335 = H200).
    assert inventory.pci_gpus == {gpu.pci_address: "0x2335" for gpu in inventory.gpus}
    # The GPU fabric (captured 2026-11-23): per-link NVLink facts, fabric state, this boot's log.
    for gpu in inventory.gpus:
        assert len(gpu.nvlinks) == 18 and all(link.active for link in gpu.nvlinks)
        assert gpu.fabric is not None and (gpu.fabric.state, gpu.fabric.status) == ("completed", "success")
        assert gpu.virtualization_mode == "passthrough" and gpu.vbios_version == "96.00.A5.00.1A"
    assert inventory.nvswitches == ()                        # a VM: the host owns the NVSwitches
    # This boot's log holds no fault, only the driver's load (the real line's form, kept as an
    # event: older Xids are history, and the NVLink counters count from it).
    assert inventory.kernel_log is not None
    assert [(event.kind, event.subject) for event in inventory.kernel_log.events] == [("driver-load", "580.159.04")]
    assert inventory.uptime_s is not None and inventory.kernel_release == "6.18.44-fc-v657-gpu"


def test_real_h200_capture_has_no_false_alarm() -> None:
    report = run_check(CheckOptions(snapshot=CAPTURE, no_probe=True), env={})
    assert report.grade is Grade.PASS
    statuses = {(f.check, f.status) for f in report.findings}
    assert ("pcie-link", Status.PASS) in statuses and ("gpu-driver", Status.PASS) in statuses
    # Captured (2026-11-23) before PCI functions kept their place under their bridges: the
    # path check says it cannot judge, and why, rather than guessing.
    path = [f for f in report.findings if f.check == "pcie-p2p-path"]
    assert [(f.status, f.summary) for f in path] == [(Status.UNKNOWN, (
        "the PCIe tree above the GPUs and NICs is not known (a snapshot taken before netdoctor 0.2 keeps PCI "
        "functions without their bridges)"))]
    # Captured before pcie-p2p-path's bridges, nccl-env.json and NVML's health fields were
    # recorded: those three say so.
    assert all(f.status in (Status.PASS, Status.SKIP) for f in report.findings
               if f.check not in ("pcie-p2p-path", "nccl-env", "gpu-health"))
    assert [(f.subject, f.status) for f in report.findings if f.check == "gpu-health"] == [("node", Status.UNKNOWN)]


def test_real_h100_capture_with_its_pcie_tree() -> None:
    # A single H100 SXM passed through to a Firecracker VM (device tool nvidia-h100-x1, 2026-11-24):
    # the GPU on the VM's root bus, no bridge, no IOMMU group, no DMI table; NVML says pass-through.
    with open_snapshot(H100_CAPTURE) as source:
        inventory = build_inventory(source)
    assert [gpu.name for gpu in inventory.gpus] == ["NVIDIA H100 80GB HBM3"]
    assert inventory.gpus[0].nvlink_total == 0       # no NVLink exposed; `nvidia-smi nvlink -s` printed nothing
    assert inventory.source("nvidia-smi-nvlink-s").state is SourceState.OK
    tree = inventory.pci_tree
    assert tree is not None and list(tree) == ["0000:00:06.0"]
    gpu = tree["0000:00:06.0"]
    assert (gpu.parent, gpu.port_type, gpu.has_acs, gpu.iommu_group, gpu.capabilities_from) == (
        None, "endpoint", False, None, "config")          # 4096 bytes of config space read as root
    assert inventory.virtualization == "GPU virtualization mode passthrough (NVML)"
    assert inventory.source("lspci-vvv").state is SourceState.MISSING   # the VM image has no pciutils
    report = run_check(CheckOptions(snapshot=H100_CAPTURE, no_probe=True), env={})
    assert report.grade is Grade.PASS
    # Captured before nccl-env.json and NVML's health fields (gpu-health says it has none).
    assert all(f.status in (Status.PASS, Status.SKIP) for f in report.findings
               if f.check not in ("nccl-env", "gpu-health"))
    assert [f.status for f in report.findings if f.check == "nccl-env"] == [Status.UNKNOWN]   # no nccl-env.json yet
    assert [f.summary for f in report.findings if f.check == "pcie-p2p-path"] == [
        "no peer-to-peer PCIe path to judge: one GPU and no RDMA NIC"]


def test_report_carries_the_versions_the_node_runs() -> None:
    # CONTRACT 6.3 `versions`: what a fleet compares to find the odd node.
    report = run_check(CheckOptions(snapshot=CAPTURE, no_probe=True), env={})
    assert report.to_json()["versions"] == {"driver": "580.159.04", "cuda_driver": "13.0",
                                            "vbios": {"NVIDIA H200": "96.00.A5.00.1A"}, "kernel": "6.18.44-fc-v657-gpu"}
    fixture = run_check(CheckOptions(snapshot=Path(__file__).parent / "fixtures" / "nodes" / "dgx-h100", no_probe=True), env={})
    assert fixture.to_json()["versions"]["hca_firmware"] == {"MT4129 MT_0000000838": "28.39.1002"}


HEALTH_CAPTURES = [(Path(__file__).parent / "data" / "device" / kind / "health" / name, gpus) for kind, name, gpus in (
    ("nvidia-h100-x1", "nvml-idle.json", 1), ("nvidia-h100-x1", "nvml-load.json", 1),
    ("nvidia-h200-x2", "nvml-idle.json", 2))]


@pytest.mark.parametrize(("nvml", "gpus"), HEALTH_CAPTURES, ids=lambda value: getattr(value, "parent", value))
def test_real_health_fields_read_back_and_pass(tmp_path: Path, nvml: Path, gpus: int) -> None:
    """CONTRACT 7.2 as netdoctor's collector wrote it on the device tool's H100 (idle, and under
    a bf16 matmul: 100 % utilization, sw_power_cap) and 2x H200 (tests/data/device/health-capture.sh):
    the joiner reads every field, and gpu-health and pcie-link pass healthy GPUs at Gen5."""
    (tmp_path / "snapshot.json").write_text(json.dumps({
        "format": "netdoctor.snapshot/1", "host": "device", "captured_at": "2026-11-26T10:40:00Z", "netdoctor": "0.3.0"}))
    (tmp_path / "nvml.json").write_bytes(nvml.read_bytes())
    with open_snapshot(tmp_path) as source:
        inventory = build_inventory(source)
    assert inventory.nvml_device_count == len(inventory.gpus) == gpus
    for gpu in inventory.gpus:
        assert gpu.memory is not None and gpu.memory.ecc_mode == "enabled"
        assert (gpu.memory.volatile_uncorrected, gpu.memory.remap_pending, gpu.memory.remap_failure) == (0, False, False)
        assert gpu.memory.retired_sbe is None            # Hopper retires rows, not pages
        assert gpu.recovery_action == "none" and gpu.pcie_replay_counter == 0
        assert gpu.clocks_event_reasons in (("gpu_idle",), ("sw_power_cap",))
        assert gpu.utilization_gpu is not None
    report = run_check(CheckOptions(snapshot=tmp_path, no_probe=True, only=("gpu-health", "pcie-link")), env={})
    statuses = {(finding.check, finding.status) for finding in report.findings}
    assert statuses == {("gpu-health", Status.PASS), ("pcie-link", Status.PASS)}, report.findings
