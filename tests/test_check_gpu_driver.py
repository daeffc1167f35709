"""gpu-driver: the PCI bus and the driver (NVML) must agree on the GPUs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from netdoctor.report.model import Grade, Status
from netdoctor.run import CheckOptions, run_check

NODES = Path(__file__).parent / "fixtures" / "nodes"


def _copy(tmp_path: Path, name: str = "dgx-h100") -> Path:
    target = tmp_path / name
    shutil.copytree(NODES / name, target, symlinks=True)
    return target


def _driver_findings(snapshot: Path):
    report = run_check(CheckOptions(snapshot=snapshot, no_probe=True, only=("gpu-driver",)), env={})
    return report, [f for f in report.findings if f.check == "gpu-driver"]


def _set_nvml_status(snapshot: Path, status: str) -> None:
    (snapshot / "nvml.json").unlink()
    meta = json.loads((snapshot / "snapshot.json").read_text())
    meta["nvml_status"] = status
    (snapshot / "snapshot.json").write_text(json.dumps(meta))


def test_every_gpu_visible_passes() -> None:
    _, findings = _driver_findings(NODES / "dgx-h100")
    assert [(f.status, f.subject) for f in findings] == [(Status.PASS, f"GPU{i}") for i in range(8)]


def test_driver_library_mismatch_fails_and_keeps_the_right_pack(tmp_path: Path) -> None:
    snapshot = _copy(tmp_path)
    _set_nvml_status(snapshot, "NVML failed to start: Driver/library version mismatch")
    report, findings = _driver_findings(snapshot)
    assert [(f.status, f.subject) for f in findings] == [(Status.FAIL, "node")]
    assert "8 NVIDIA GPU(s) on the PCI bus" in findings[0].summary and "version mismatch" in findings[0].summary
    assert "reboot" in findings[0].remedy
    assert report.grade is Grade.FAIL
    assert report.rules == "dgx-h100"   # GPUs named from their PCI device ids


def test_gpu_on_the_bus_but_not_in_nvml_fails(tmp_path: Path) -> None:
    snapshot = _copy(tmp_path)
    nvml = json.loads((snapshot / "nvml.json").read_text())
    missing = nvml["gpus"].pop(3)
    (snapshot / "nvml.json").write_text(json.dumps(nvml))
    _, findings = _driver_findings(snapshot)
    failed = [f for f in findings if f.status is Status.FAIL]
    assert len(failed) == 1
    assert failed[0].subject.replace("0000:", "").lower() == missing["pci_bus_id"].lower().replace("00000000:", "")
    assert "7 of 8" in failed[0].summary


def test_missing_nvml_bindings_are_unknown_not_fail(tmp_path: Path) -> None:
    snapshot = _copy(tmp_path)
    _set_nvml_status(snapshot, "nvidia-ml-py (pynvml) is not installed")
    _, findings = _driver_findings(snapshot)
    assert [(f.status, f.subject) for f in findings] == [(Status.UNKNOWN, "node")]


def test_node_without_gpus_skips() -> None:
    _, findings = _driver_findings(NODES / "cpu-node")
    assert [f.status for f in findings] == [Status.SKIP]


def test_gpus_are_listed_from_the_pci_bus_when_nvml_and_nvidia_smi_are_down(tmp_path: Path) -> None:
    from netdoctor.host.snapshot import open_snapshot
    from netdoctor.inventory.build import build_inventory

    snapshot = _copy(tmp_path)
    _set_nvml_status(snapshot, "NVML failed to start: Driver/library version mismatch")
    (snapshot / "commands" / "nvidia-smi-topo-m.status").write_text("18\n")
    (snapshot / "commands" / "nvidia-smi-topo-m.out").write_text("Failed to initialize NVML: Driver/library version mismatch\n")
    with open_snapshot(snapshot) as source:
        inventory = build_inventory(source)
    assert [gpu.name for gpu in inventory.gpus] == ["NVIDIA H100 80GB HBM3"] * 8
    assert inventory.gpus[0].pci_address == "0000:1b:00.0" and inventory.gpus[0].numa_node == 0
    assert inventory.gpus[0].pci_address in inventory.pcie
    report, findings = _driver_findings(snapshot)
    assert report.rules == "dgx-h100" and [f.status for f in findings] == [Status.FAIL]


def test_nvml_library_missing_beside_a_loaded_driver_is_unknown(tmp_path: Path) -> None:
    """A container without libnvidia-ml on a host whose nvidia module is loaded: the tool cannot ask, the node is not broken."""
    snapshot = _copy(tmp_path)
    _set_nvml_status(snapshot, "no NVIDIA driver: NVML Shared Library Not Found")
    assert (snapshot / "sys" / "module" / "nvidia").is_dir()
    _, findings = _driver_findings(snapshot)
    assert [(f.status, f.subject) for f in findings] == [(Status.UNKNOWN, "node")]
    shutil.rmtree(snapshot / "sys" / "module" / "nvidia")   # no kernel driver at all: the node is broken
    _, findings = _driver_findings(snapshot)
    assert [(f.status, f.subject) for f in findings] == [(Status.FAIL, "node")]


def test_the_prolog_fixture_fails_the_two_gpus_the_driver_lost() -> None:
    """slurmd's Prolog (SLURM_JOB_ID, slurmd.service's cgroup) whose every device node opens: not hidden."""
    report, findings = _driver_findings(NODES / "dgx-h100-prolog-6-gpus")
    failed = [f for f in findings if f.status is Status.FAIL]
    assert [f.subject for f in failed] == ["0000:d1:00.0", "0000:df:00.0"]
    assert all(f.evidence["device_node"] == "ok" and "device node opens" in f.summary for f in failed)
    assert report.grade is Grade.FAIL


def test_the_job_fixture_skips_the_gpus_its_device_cgroup_denies() -> None:
    _, findings = _driver_findings(NODES / "dgx-h100-job-2-gpus")
    skipped = [f for f in findings if f.status is Status.SKIP]
    assert len(skipped) == 6 and all(f.evidence["device_node"] == "denied" for f in skipped)
    assert not [f for f in findings if f.status is Status.FAIL]


def test_a_job_snapshot_without_device_nodes_is_judged_as_before(tmp_path: Path) -> None:
    """An older capture (no `device_nodes`): SLURM variables alone hide nothing, the six GPUs fail."""
    snapshot = _copy(tmp_path, "dgx-h100-job-2-gpus")
    meta = json.loads((snapshot / "snapshot.json").read_text())
    del meta["visibility"]["device_nodes"]
    (snapshot / "snapshot.json").write_text(json.dumps(meta))
    _, findings = _driver_findings(snapshot)
    assert len([f for f in findings if f.status is Status.FAIL]) == 6
