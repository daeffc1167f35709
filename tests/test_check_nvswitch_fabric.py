"""nvswitch-fabric: fabric manager (and IMEX in an NVLink domain) running where NVSwitches
are on the bus; each GPU's NVML fabric state completed/success; skip on PCIe GPUs."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

from netdoctor.inventory.model import GpuFabric, Inventory, ServiceState
from netdoctor.report.model import Finding, Status
from netdoctor_plugins.nvswitch_fabric import nvswitch_fabric
from inventory_factory import dgx_h100, gpu, run_check

CHECK = "nvswitch-fabric"
DONE = GpuFabric("completed", "success", 0, "00000000-0000-0000-0000-000000000000")
RUNNING = ServiceState("nvidia-fabricmanager", "active", "running", "success", 0,
                       datetime(2026, 11, 21, 20, 0, tzinfo=timezone.utc))


def node(*, states: tuple[GpuFabric | None, ...] = (DONE,) * 8, switches: tuple[str, ...] | None = (
        "0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"),
         services: dict[str, ServiceState] | None = None) -> Inventory:
    inventory = dgx_h100(gpus=[replace(gpu(index), fabric=state) for index, state in enumerate(states)])
    inventory.nvswitches = switches
    inventory.services = {"nvidia-fabricmanager": RUNNING} if services is None else services
    return inventory


def run(inventory: Inventory) -> dict[str, Finding]:
    return {finding.subject: finding for finding in run_check(nvswitch_fabric, CHECK, inventory, pack_name="dgx-h100")}


def test_healthy_nvswitch_node_passes() -> None:
    findings = run(node())
    assert {finding.status for finding in findings.values()} == {Status.PASS}
    assert findings["nvidia-fabricmanager"].summary == "nvidia-fabricmanager is running"
    assert findings["GPU0 0000:18:00.0"].summary == "fabric registration completed"


def test_fabric_manager_failed_fails_with_its_result() -> None:
    failed = ServiceState("nvidia-fabricmanager", "failed", "failed", "exit-code", 0, None)
    finding = run(node(services={"nvidia-fabricmanager": failed}))["nvidia-fabricmanager"]
    assert finding.status is Status.FAIL
    assert finding.summary.startswith("nvidia-fabricmanager is failed/failed, result exit-code (4 NVSwitches on the PCI bus)")
    assert "journalctl -u nvidia-fabricmanager" in (finding.remedy or "")


def test_restarting_fabric_manager_warns() -> None:
    flapping = replace(RUNNING, restarts=3)
    assert run(node(services={"nvidia-fabricmanager": flapping}))["nvidia-fabricmanager"].status is Status.WARN


def test_in_progress_warns_and_not_started_fails() -> None:
    states = (GpuFabric("in_progress", "success"), GpuFabric("not_started", None)) + (DONE,) * 6
    findings = run(node(states=states))
    assert findings["GPU0 0000:18:00.0"].status is Status.WARN
    assert findings["GPU1 0000:2a:00.0"].status is Status.FAIL
    assert findings["GPU1 0000:2a:00.0"].summary.startswith("fabric state not_started")


def test_a_vm_without_switches_passes_on_nvml_completed_alone() -> None:
    # The device tool's 2x H200 VM: no NVSwitch function, no systemd, fabric completed.
    findings = run(node(switches=(), services={}))
    assert "nvidia-fabricmanager" not in findings
    assert findings["GPU0 0000:18:00.0"].status is Status.PASS and "host manages the fabric" in findings["GPU0 0000:18:00.0"].summary


def test_nvlink_domain_needs_imex() -> None:
    domain = GpuFabric("completed", "success", 3, "9f1c6a9e-1d1b-4c1e-9a42-2b3a0f6c7d11")
    findings = run(node(states=(domain,) * 8))
    assert findings["nvidia-imex"].status is Status.UNKNOWN
    assert "nvidia-imex is needed (the GPUs belong to a multi-node NVLink domain" in findings["nvidia-imex"].summary


def test_pcie_gpus_skip() -> None:
    findings = run(node(states=(GpuFabric("not_supported"),) * 8, switches=(), services={}))
    assert [finding.status for finding in findings.values()] == [Status.SKIP]
