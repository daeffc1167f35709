"""`inventory`: the platform's GPUs, NVSwitches and compute NICs against what is there; GPUs hidden
on purpose are unknown, never failed (CONTRACT 7.1). Also DMI and visibility capture."""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from pathlib import Path

from inventory_factory import dgx_h100, gpu, ib_hca, only, pack, run_check, storage_hca
from netdoctor_plugins.gpu_driver import gpu_driver
from netdoctor_plugins.inventory import inventory

from netdoctor.host.sysfs import RootedSysTree
from netdoctor.host.visibility import (
    cgroup_path,
    collect_device_nodes,
    collect_visibility,
    device_minor,
    visibility_from_json,
)
from netdoctor.inventory.from_platform import dmi_text
from netdoctor.inventory.model import (
    Dmi,
    Inventory,
    ProcessVisibility,
    SourceState,
    SourceStatus,
)
from netdoctor.inventory.platform import node_platform
from netdoctor.report.model import Status

CHECK = "inventory"
# A DGX H100's GPUs (nvidia-smi: 1B 43 52 61 9D C3 D1 DF), as rules/default.toml lists them.
DGX_GPUS = ("0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0",
            "0000:9d:00.0", "0000:c3:00.0", "0000:d1:00.0", "0000:df:00.0")
SWITCHES = ("0000:07:00.0", "0000:08:00.0", "0000:09:00.0", "0000:0a:00.0")
# Its rails in GPU order and its dual-port storage ConnectX-7 (DGX H100/H200 User Guide, Network Port Mapping).
DGX_RAILS = ("0000:18:00.0", "0000:40:00.0", "0000:4f:00.0", "0000:5e:00.0",
             "0000:9a:00.0", "0000:c0:00.0", "0000:ce:00.0", "0000:dc:00.0")
DGX_STORAGE = ("0000:29:00.0", "0000:29:00.1", "0000:aa:00.0", "0000:aa:00.1")
# A job step under ConstrainDevices: its device cgroup denies the six GPUs it was not given.
SLURM_JOB = ProcessVisibility(cuda_visible_devices="0,1", slurm_job_id="1234", slurm_step_id="0", slurm_gpus="0,1",
                              cgroup="/system.slice/slurmstepd.scope/job_1234/step_0/user/task_0",
                              device_nodes={**{address: "ok" for address in DGX_GPUS[:2]},
                                            **{address: "denied" for address in DGX_GPUS[2:]}})
# slurmd's Prolog/HealthCheckProgram: the job's id and slurmd's cgroup, but no device cgroup of its own.
PROLOG = ProcessVisibility(slurm_job_id="1234", cgroup="/system.slice/slurmd.service",
                           device_nodes={address: "ok" for address in DGX_GPUS})


def dgx(*, product: str | None = "DGXH100", gpus_on_bus: int = 8, nvml_gpus: int = 8, switches: int = 4,
        rdma: bool = True, driver: str | None = "mlx5_core", gpu_name: str = "NVIDIA H100 80GB HBM3") -> Inventory:
    """A DGX H100 as sysfs and NVML show it: DMI, the GPUs on the bus, NVSwitches, ConnectX functions."""
    node = dgx_h100(gpus=[gpu(index, address=DGX_GPUS[index]) for index in range(nvml_gpus)],
                    hcas=[ib_hca(index, address=DGX_RAILS[index]) for index in range(8)]
                    + [replace(storage_hca(), pci_address="0000:aa:00.0")])
    for item in node.gpus:
        item.name = gpu_name
    node.dmi = Dmi("NVIDIA", product, None, "NVIDIA") if product is not None else None
    node.pci_gpus = {address: "0x2330" for address in DGX_GPUS[:gpus_on_bus]}
    node.nvswitches = SWITCHES[:switches]
    node.pci_nics = {hca.pci_address: ("0x1021", driver) for hca in node.hcas if hca.ca_type == "MT4129"}
    node.pci_nics |= {"0000:aa:00.0": ("0x1021", driver), "0000:aa:00.1": ("0x1021", driver)}   # storage CX-7
    if not rdma:
        node.hcas = []
    return node


def statuses(findings: list) -> list[tuple[str, str]]:
    return sorted((str(finding.status), finding.subject) for finding in findings)


# -- healthy ------------------------------------------------------------------------------------------
def test_a_whole_dgx_h100_passes_gpus_nvswitches_and_rails() -> None:
    findings = run_check(inventory, CHECK, dgx(), pack_name="dgx-h100")
    assert statuses(findings) == [("pass", "node")] * 3
    summaries = " | ".join(finding.summary for finding in findings)
    assert "8 GPUs on the PCI bus (DGXH100 has 8)" in summaries
    assert "4 NVSwitches on the PCI bus (DGXH100 has 4)" in summaries
    assert "8 compute NICs with an RDMA device (DGXH100 has 8)" in summaries
    assert findings[0].evidence["platform_basis"] == "DMI product_name 'DGXH100'"


def test_an_unknown_platform_with_nothing_pinned_is_skipped_with_why() -> None:
    node = dgx(product="SYS-521GE-TNRT", switches=0, gpu_name="NVIDIA H100 NVL")
    node.pci_gpus = {address: "0x2321" for address in DGX_GPUS}
    finding = only(run_check(inventory, CHECK, node), "node")
    assert finding.status is Status.SKIP
    assert "platform is not known (DMI product 'SYS-521GE-TNRT'" in finding.summary


# -- GPUs -----------------------------------------------------------------------------------------------
def test_a_gpu_gone_from_bus_and_nvml_fails_by_the_address_the_platform_has_it_at() -> None:
    findings = run_check(inventory, CHECK, dgx(gpus_on_bus=7, nvml_gpus=7), pack_name="dgx-h100")
    missing = only(findings, "0000:df:00.0", Status.FAIL)
    assert missing.summary == "GPU at 0000:df:00.0 expected by DGXH100: not on the bus (7 of 8 GPUs there)"
    assert missing.rule == "missing_severity" and "Xid 79" in (missing.remedy or "")
    # One fault, one failure: the rail beside the lost GPU still counts as a rail.
    assert [finding.status for finding in findings if finding.subject == "node"] == [Status.PASS, Status.PASS]


def test_a_gpu_missing_where_the_layout_differs_fails_by_count() -> None:
    node = dgx(gpus_on_bus=7, nvml_gpus=7)
    node.pci_gpus = {f"0000:{bus:02x}:00.0": "0x2330" for bus in (0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba)}
    for item, address in zip(node.gpus, node.pci_gpus, strict=True):
        item.pci_address = address
    finding = next(finding for finding in run_check(inventory, CHECK, node) if finding.status is Status.FAIL)
    assert (finding.subject, finding.summary) == ("node", "7 GPUs on the PCI bus, DGXH100 has 8")


def test_gpus_hidden_by_a_slurm_job_are_unknown_never_failed() -> None:
    node = dgx(nvml_gpus=2)
    node.visibility = SLURM_JOB
    finding = next(finding for finding in run_check(inventory, CHECK, node, pack_name="dgx-h100")
                   if finding.status is not Status.PASS)
    assert finding.status is Status.UNKNOWN
    assert finding.summary.startswith("this process sees 2 of 8 GPUs: its device node is denied to this process "
                                      "(device cgroup): SLURM job 1234 step 0, given GPUs 0,1")
    assert "--gres=gpu:8" in (finding.remedy or "")
    assert finding.evidence["hidden"] == list(DGX_GPUS[2:])
    # gpu-driver does not fail the six it cannot see.
    driver = run_check(gpu_driver, "gpu-driver", node)
    assert {str(finding.status) for finding in driver} == {"pass", "skip"}
    assert only(driver, "0000:df:00.0").summary.endswith("hidden from this process (its device node is denied to this "
                                                           "process (device cgroup): SLURM job 1234 step 0, given GPUs "
                                                           "0,1): not judged here")


def test_a_prolog_whose_driver_lost_two_gpus_fails_them_whatever_slurm_says() -> None:
    """Adversarial (review): SLURM_JOB_ID and a cgroup naming slurm, every device node opens, NVML lists 6 of 8."""
    node = dgx(nvml_gpus=6)
    node.visibility = PROLOG
    findings = run_check(inventory, CHECK, node, pack_name="dgx-h100")
    assert statuses(findings) == [("fail", "0000:d1:00.0"), ("fail", "0000:df:00.0"), ("pass", "node"), ("pass", "node")]
    lost = only(findings, "0000:df:00.0", Status.FAIL)
    assert "opens its device node, but NVML does not list it: the driver lost it (6 of 8" in lost.summary
    assert "Xid 79" in (lost.remedy or "") and lost.rule == "missing_severity"
    driver = run_check(gpu_driver, "gpu-driver", node)
    assert only(driver, "0000:d1:00.0").status is Status.FAIL
    assert "its device node opens, so the driver lost it" in only(driver, "0000:df:00.0").summary


def test_environment_alone_never_hides_a_gpu() -> None:
    """CUDA_VISIBLE_DEVICES (NVML ignores it), NVIDIA_VISIBLE_DEVICES on bare metal, a SLURM cgroup, a
    container marker: without a device node absent or denied, the GPU NVML lacks is failed by gpu-driver."""
    for visibility in (ProcessVisibility(cuda_visible_devices="0,1"), ProcessVisibility(nvidia_visible_devices="2,3"),
                       ProcessVisibility(cgroup="/slurm/uid_1000/job_77/step_0", slurm_job_id="77"),
                       ProcessVisibility(container="/.dockerenv"),
                       ProcessVisibility(slurm_job_id="77", device_nodes={address: "unknown" for address in DGX_GPUS})):
        node = dgx(nvml_gpus=2)
        node.visibility = visibility
        assert not [finding for finding in run_check(inventory, CHECK, node) if finding.status is Status.UNKNOWN]
        assert only(run_check(gpu_driver, "gpu-driver", node), "0000:df:00.0").status is Status.FAIL, visibility


def test_a_kubernetes_pod_not_given_six_gpus_is_unknown_not_drained() -> None:
    """containerd + CDI, cgroup namespace ("/"), no /.dockerenv, no NVIDIA_VISIBLE_DEVICES: the six
    GPUs' device nodes are absent from the pod's /dev."""
    node = dgx(nvml_gpus=2)
    node.visibility = ProcessVisibility(cgroup="/", kubernetes_service_host="10.96.0.1",
                                        device_nodes={**{address: "ok" for address in DGX_GPUS[:2]},
                                                      **{address: "absent" for address in DGX_GPUS[2:]}})
    finding = next(finding for finding in run_check(inventory, CHECK, node) if finding.status is Status.UNKNOWN)
    assert "not in this process's /dev (not given to this container): a Kubernetes pod" in finding.summary
    driver = run_check(gpu_driver, "gpu-driver", node)
    assert {str(finding.status) for finding in driver} == {"pass", "skip"}
    # Mixed: one of the eight is lost (its node opens), the others hidden: only the lost one fails.
    node.visibility = ProcessVisibility(device_nodes={**{address: "ok" for address in DGX_GPUS[:3]},
                                                      **{address: "absent" for address in DGX_GPUS[3:]}})
    node.gpus = node.gpus[:2]
    driver = run_check(gpu_driver, "gpu-driver", node)
    assert [finding.subject for finding in driver if finding.status is Status.FAIL] == [DGX_GPUS[2]]
    assert only(run_check(inventory, CHECK, node), DGX_GPUS[2]).status is Status.FAIL


def test_fewer_gpus_in_nvml_without_a_reason_is_the_drivers_fault_not_hidden() -> None:
    node = dgx(nvml_gpus=6)
    node.visibility = ProcessVisibility()          # recorded: nothing constrains this process
    findings = run_check(inventory, CHECK, node)
    assert statuses(findings) == [("pass", "node")] * 3     # all 8 are on the bus
    driver = run_check(gpu_driver, "gpu-driver", node)
    assert only(driver, "0000:d1:00.0").status is Status.FAIL


def test_a_hidden_gpu_that_is_also_missing_from_the_bus_still_fails() -> None:
    node = dgx(gpus_on_bus=7, nvml_gpus=2)
    node.visibility = SLURM_JOB
    assert only(run_check(inventory, CHECK, node), "0000:df:00.0").status is Status.FAIL


def test_nvml_answering_for_more_gpus_than_the_bus_shows_is_no_failure() -> None:
    """Adversarial: a short read of the bus (3 GPUs) while NVML answers for 8 never fails the node."""
    node = dgx(gpus_on_bus=3)
    finding = next(finding for finding in run_check(inventory, CHECK, node) if "GPUs" in finding.summary)
    assert finding.status is Status.PASS and finding.evidence["nvml_visible"] == 8


def test_gpus_not_counted_when_neither_bus_nor_nvml_was_read_is_unknown() -> None:
    node = dgx(nvml_gpus=0)
    node.pci_gpus = None
    node.sources["nvml"] = SourceStatus("nvml", SourceState.ERROR, "Driver/library version mismatch")
    finding = next(finding for finding in run_check(inventory, CHECK, node) if finding.status is Status.UNKNOWN)
    assert "the PCI bus was not read and nvml failed: Driver/library version mismatch" in finding.summary


# -- the platform and the pins ---------------------------------------------------------------------------
def test_unknown_dmi_and_fewer_gpus_than_pinned_fails_by_the_pin() -> None:
    """Adversarial: no platform from DMI (a whitebox), no NVSwitch: the site's pin still judges."""
    node = dgx(product="Default string", switches=0, gpus_on_bus=6, nvml_gpus=6)
    node.dmi = Dmi(None, dmi_text("Default string"), None, None)
    assert node_platform(node) is None
    findings = run_check(inventory, CHECK, node, overrides={"gpus": 8})
    finding = only(findings, "node", Status.FAIL)
    assert finding.summary == "6 GPUs on the PCI bus, the pack 'default' pins gpus = 8"


def test_garbage_dmi_text_is_no_platform_and_the_bus_decides() -> None:
    node = dgx(product="\x00\x01\x02")
    node.dmi = Dmi(dmi_text("\x7f\x7f"), dmi_text("\x00\x01\x02"), dmi_text("To Be Filled By O.E.M."), dmi_text("x" * 500))
    assert node.dmi == Dmi(None, None, None, None)
    platform = node_platform(node)
    assert platform is not None and platform.id == "HGX_H100_8GPU"
    assert "4 NVSwitches on the PCI bus" in platform.basis
    findings = run_check(inventory, CHECK, node)
    assert statuses(findings) == [("pass", "node")] * 2    # GPUs and NVSwitches; an OEM board's NICs are not fixed


def test_a_pin_wins_over_the_platform_and_zero_is_not_pinned() -> None:
    findings = run_check(inventory, CHECK, dgx(), overrides={"gpus": 16})
    assert only(findings, "node", Status.FAIL).summary == "8 GPUs on the PCI bus, the pack 'default' pins gpus = 16"
    assert statuses(run_check(inventory, CHECK, dgx(), overrides={"gpus": 0})) == [("pass", "node")] * 3


def test_an_h100_nvl_is_never_an_hgx_platform_even_beside_nvswitch_like_functions() -> None:
    node = dgx(product=None, gpu_name="NVIDIA H100 NVL")
    node.pci_gpus = {address: "0x2321" for address in DGX_GPUS}
    assert node_platform(node) is None


def test_a_missing_nvswitch_fails_with_the_count() -> None:
    finding = only(run_check(inventory, CHECK, dgx(switches=3)), "node", Status.FAIL)
    assert finding.summary == "3 NVSwitches on the PCI bus, DGXH100 has 4"
    assert "lspci -d 10de:" in (finding.remedy or "")


# -- compute NICs ----------------------------------------------------------------------------------------
def test_connectx_functions_without_rdma_devices_fail_naming_mlx5_ib() -> None:
    finding = only(run_check(inventory, CHECK, dgx(rdma=False), pack_name="dgx-h100"), "node", Status.FAIL)
    assert finding.summary.startswith("10 ConnectX functions bound to mlx5_core, no RDMA device: is mlx5_ib loaded?")
    assert "modprobe mlx5_ib" in (finding.remedy or "")


def test_connectx_functions_with_no_driver_ask_for_mlx5_core() -> None:
    finding = only(run_check(inventory, CHECK, dgx(rdma=False, driver=None)), "node", Status.FAIL)
    assert "10 ConnectX functions on the PCI bus, no RDMA device: are mlx5_core and mlx5_ib loaded?" in finding.summary
    assert "modprobe mlx5_core" in (finding.remedy or "")


def test_a_pack_that_expects_compute_ports_fails_a_node_without_any() -> None:
    node = dgx(product=None, switches=0, rdma=False)
    node.pci_nics = {}
    finding = only(run_check(inventory, CHECK, node, pack_name="dgx-h100"), "node", Status.FAIL)
    assert finding.summary == ("no compute port: the pack 'dgx-h100' expects compute ports (port class 'compute'), "
                               "and the node has none")


def test_a_lost_rail_fails_by_its_address_and_gpu_and_says_its_function_has_no_rdma_device() -> None:
    node = dgx()
    node.hcas = [hca for hca in node.hcas if hca.name != "mlx5_3"]
    finding = only(run_check(inventory, CHECK, node, pack_name="dgx-h100"), "0000:5e:00.0", Status.FAIL)
    assert finding.summary == ("compute NIC at 0000:5e:00.0 (GPU3's rail) expected by DGXH100: on the PCI bus "
                               "(bound to mlx5_core) without an RDMA device (7 of 8 rails there)")
    assert "modprobe mlx5_ib" in (finding.remedy or "")
    node.pci_nics.pop("0000:5e:00.0")
    finding = only(run_check(inventory, CHECK, node, pack_name="dgx-h100"), "0000:5e:00.0", Status.FAIL)
    assert finding.summary.endswith("expected by DGXH100: not on the PCI bus (7 of 8 rails there)")


def test_the_storage_port_does_not_count_as_a_rail() -> None:
    node = dgx()
    node.hcas = [hca for hca in node.hcas if hca.name != "mlx5_7"] + [ib_hca(8, name="mlx5_8", link_layer=None)]
    findings = run_check(inventory, CHECK, node, pack_name="dgx-h100")
    assert only(findings, "0000:dc:00.0", Status.FAIL).summary.startswith("compute NIC at 0000:dc:00.0 (GPU7's rail)")


def superpod_storage(node: Inventory) -> Inventory:
    """The two dual-port storage ConnectX-7 of a SuperPOD DGX H100, all four ports InfiniBand (MT4129,
    the rails' type), off the GPUs' switches (NODE/SYS in nvidia-smi topo -m)."""
    node.hcas = [hca for hca in node.hcas if hca.pci_address in DGX_RAILS]
    for index, address in enumerate(DGX_STORAGE, start=8):
        node.hcas.append(ib_hca(index, name=f"mlx5_{index}", address=address, numa_node=0 if index < 10 else 1))
    node.pci_nics = (node.pci_nics or {}) | {address: ("0x1021", "mlx5_core") for address in DGX_STORAGE}
    assert node.topology is not None
    links = dict(node.topology.links)
    for index in range(8, 12):
        links |= {(f"GPU{gpu_index}", f"NIC{index}"): "NODE" if (gpu_index < 4) == (index < 10) else "SYS"
                  for gpu_index in range(8)}
    node.topology = replace(node.topology, nics=tuple(f"NIC{index}" for index in range(12)), links=links,
                            nic_names={f"NIC{index}": f"mlx5_{index}" for index in range(12)})
    return node


def test_storage_in_infiniband_mode_never_stands_in_for_a_lost_rail() -> None:
    node = superpod_storage(dgx())
    healthy = run_check(inventory, CHECK, node, pack_name="dgx-h100")
    assert statuses(healthy) == [("pass", "node")] * 3
    assert "8 compute NICs with an RDMA device (DGXH100 has 8)" in " | ".join(item.summary for item in healthy)
    node.hcas = [hca for hca in node.hcas if hca.name != "mlx5_1"]
    node.pci_nics.pop("0000:40:00.0")
    findings = run_check(inventory, CHECK, node, pack_name="dgx-h100")
    assert statuses(findings) == [("fail", "0000:40:00.0"), ("pass", "node"), ("pass", "node")]
    assert only(findings, "0000:40:00.0", Status.FAIL).summary == (
        "compute NIC at 0000:40:00.0 (GPU1's rail) expected by DGXH100: not on the PCI bus (7 of 8 rails there)")


def test_storage_in_infiniband_mode_is_placed_by_topology_where_the_platform_lists_no_rails() -> None:
    # The factory's layout (not the platform's addresses): a single-port IB storage NIC, NODE/SYS to every GPU.
    node = dgx_h100(storage="cx7-ib", gpus=[gpu(index, address=DGX_GPUS[index]) for index in range(8)])
    node.dmi = Dmi("NVIDIA", "DGXH100", None, "NVIDIA")
    node.hcas = [hca for hca in node.hcas if hca.name != "mlx5_3"]
    finding = only(run_check(inventory, CHECK, node, pack_name="dgx-h100"), "node", Status.FAIL)
    assert finding.summary == ("7 compute NICs with an RDMA device, DGXH100 has 8; no compute NIC at PIX/PXB to "
                               "GPU3 in nvidia-smi topo -m")
    assert "mlx5_8" not in finding.evidence["compute_nics"]


def test_unknown_placement_counts_by_class_and_says_so_but_never_counts_dual_port_storage() -> None:
    node = superpod_storage(dgx(product=None))      # an HGX H100 board: no rail addresses, compute_nics pinned
    node.topology = None
    node.hcas = [hca for hca in node.hcas if hca.name != "mlx5_1"]
    node.pci_nics.pop("0000:40:00.0")
    findings = run_check(inventory, CHECK, node, pack_name="dgx-h100", overrides={"compute_nics": 8})
    finding = only(findings, "node", Status.FAIL)
    assert finding.summary.startswith("7 compute NICs with an RDMA device, the pack 'dgx-h100' pins compute_nics = 8; "
                                      "placement not known for mlx5_0, mlx5_2, mlx5_3")
    assert "counted by port class alone" in finding.summary
    assert finding.evidence["compute_nics"] == ["mlx5_0", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"]
    # A single-port storage NIC cannot be told from a rail without placement: it is counted, and the pass says so.
    node.hcas.append(ib_hca(12, name="mlx5_12", address="0000:e8:00.0"))
    passed = [item for item in run_check(inventory, CHECK, node, pack_name="dgx-h100", overrides={"compute_nics": 8})
              if "compute NICs" in item.summary]
    assert [item.status for item in passed] == [Status.PASS]
    assert "placement not known for" in passed[0].summary and "a storage port may be among them" in passed[0].summary


# -- capture: DMI text and what hides GPUs -------------------------------------------------------------
def test_dmi_text_keeps_names_and_drops_placeholders() -> None:
    assert dmi_text("DGXH100\n") == "DGXH100"
    assert dmi_text("  PowerEdge   XE9680 ") == "PowerEdge XE9680"
    for placeholder in ("To Be Filled By O.E.M.", "Default string", "System Product Name", "0123456789", "----",
                        "", None, "ÿÿÿÿ"):
        assert dmi_text(placeholder) is None, placeholder


def test_visibility_records_slurm_containers_and_the_device_cgroup(tmp_path: Path) -> None:
    cgroup = tmp_path / "cgroup"
    cgroup.write_text("12:devices:/slurm/uid_1000/job_1234/step_0\n0::/system.slice/slurmstepd.scope\n")
    marker = tmp_path / ".dockerenv"
    marker.write_text("")
    seen = collect_visibility({"SLURM_JOB_ID": "1234", "SLURM_JOB_GPUS": "0,1", "CUDA_VISIBLE_DEVICES": "0,1",
                               "LD_PRELOAD": "/evil.so"}, cgroup_file=cgroup, markers=(str(marker),))
    assert seen == {"cuda_visible_devices": "0,1", "nvidia_visible_devices": None, "slurm_job_id": "1234",
                    "slurm_step_id": None, "kubernetes_service_host": None, "slurm_gpus": "0,1",
                    "container": str(marker), "cgroup": "/slurm/uid_1000/job_1234/step_0", "device_nodes": None}
    assert cgroup_path("0::/user.slice\n") == "/user.slice"
    nothing = collect_visibility({}, cgroup_file=tmp_path / "absent", markers=())
    assert set(nothing.values()) == {None}


def _gpu_tree(tmp_path: Path) -> tuple[RootedSysTree, Path, Path]:
    """Four NVIDIA GPUs on a fake bus: 18 (node opens), 2a (denied: a device cgroup), 3a (no node in
    /dev), 5d (no /proc/driver/nvidia entry, not bound); nv-procfs.c's `information` layout."""
    sys_root, gpus_dir, dev_dir = tmp_path / "sys", tmp_path / "proc/driver/nvidia/gpus", tmp_path / "dev"
    dev_dir.mkdir(parents=True)
    for minor, bus in enumerate(("18", "2a", "3a", "5d")):
        address = f"0000:{bus}:00.0"
        device = sys_root / "bus/pci/devices" / address
        device.mkdir(parents=True)
        (device / "vendor").write_text("0x10de\n")
        (device / "class").write_text("0x030200\n")
        if bus == "5d":
            continue
        (gpus_dir / address).mkdir(parents=True)
        (gpus_dir / address / "information").write_text(
            "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\nGPU UUID: \t GPU-0\nVideo BIOS: \t 96.00.89.00.01\n"
            f"Bus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t {address}\n"
            f"Device Minor: \t {minor}\nGPU Excluded:\t No\n")
        if bus != "3a":
            # A harmless character device (/dev/null's numbers) stands for /dev/nvidiaN.
            os.mknod(dev_dir / f"nvidia{minor}", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    # A NIC and a non-GPU NVIDIA function (an NVSwitch bridge) are not probed.
    for address, vendor, pci_class in (("0000:07:00.0", "0x10de", "0x068000"), ("0000:19:00.0", "0x15b3", "0x020700")):
        (sys_root / "bus/pci/devices" / address).mkdir(parents=True)
        (sys_root / "bus/pci/devices" / address / "vendor").write_text(vendor + "\n")
        (sys_root / "bus/pci/devices" / address / "class").write_text(pci_class + "\n")
    return RootedSysTree(sys_root), gpus_dir, dev_dir


def test_device_nodes_are_opened_read_only_and_each_state_is_told(tmp_path: Path, monkeypatch) -> None:
    sys_tree, gpus_dir, dev_dir = _gpu_tree(tmp_path)
    real_open, opened = os.open, []

    def fake_open(path, flags, *args):
        opened.append((str(path), flags))
        if str(path).endswith("/nvidia1"):
            raise PermissionError(1, "Operation not permitted")     # the device cgroup's EPERM
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", fake_open)
    assert collect_device_nodes(sys_tree, gpus_dir, dev_dir) == {
        "0000:18:00.0": "ok", "0000:2a:00.0": "denied", "0000:3a:00.0": "absent", "0000:5d:00.0": "unknown"}
    assert {flags & (os.O_ACCMODE | os.O_NONBLOCK) for _, flags in opened} == {os.O_RDONLY | os.O_NONBLOCK}
    assert sorted(path.rsplit("/", 1)[1] for path, _ in opened if "/dev/" in path) == ["nvidia0", "nvidia1", "nvidia2"]
    # Through collect_visibility and back from snapshot.json; a file that is no device says nothing.
    (dev_dir / "nvidia0").unlink()
    (dev_dir / "nvidia0").write_text("")
    report = collect_visibility({}, cgroup_file=tmp_path / "absent", markers=(), sys=sys_tree, gpus_dir=gpus_dir,
                                dev_dir=dev_dir)
    assert report["device_nodes"]["0000:18:00.0"] == "unknown"
    assert visibility_from_json(report)["device_nodes"] == report["device_nodes"]
    assert visibility_from_json({"device_nodes": {"../x": "ok", "0000:18:00.0": "mine", "0000:2A:00.0": "denied"}})[
        "device_nodes"] == {"0000:2a:00.0": "denied"}
    assert device_minor("Device Minor: \t 7\n") == 7 and device_minor("Device Minor: \t x\n") is None


def test_a_legacy_container_that_masks_a_bound_gpus_driver_entry_reads_absent(tmp_path: Path) -> None:
    """nvidia-container-cli mounts only the given GPUs' /proc/driver/nvidia entries: a GPU the nvidia
    driver is bound to (sysfs) without an entry here was not given to this container."""
    sys_tree, gpus_dir, dev_dir = _gpu_tree(tmp_path)
    bound = tmp_path / "sys/bus/pci/devices/0000:5d:00.0"
    (tmp_path / "sys/bus/pci/drivers/nvidia").mkdir(parents=True)
    (bound / "driver").symlink_to("../../drivers/nvidia")
    assert collect_device_nodes(sys_tree, gpus_dir, dev_dir)["0000:5d:00.0"] == "absent"
    # No /proc/driver/nvidia at all (the driver not loaded, or not shown): unknown, judged as before.
    assert set(collect_device_nodes(sys_tree, tmp_path / "none", dev_dir).values()) == {"unknown"}


def test_capture_records_dmi_and_visibility_and_a_snapshot_gives_them_back(tmp_path: Path, monkeypatch) -> None:
    from netdoctor.host.live import LiveSource
    from netdoctor.host.snapshot import open_snapshot, write_snapshot
    from netdoctor.inventory.build import build_inventory

    sys_root = tmp_path / "sys"
    dmi = sys_root / "devices/virtual/dmi/id"
    dmi.mkdir(parents=True)
    for name, value in (("sys_vendor", "NVIDIA"), ("product_name", "DGXH100"), ("board_name", "DGXH100"),
                        ("board_vendor", "NVIDIA")):
        (dmi / name).write_text(value + "\n")
    (sys_root / "class").mkdir()
    (sys_root / "class/dmi").symlink_to("../devices/virtual/dmi")
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    live = LiveSource(sys_root=sys_root, record=True)
    inventory_live = build_inventory(live, needs=frozenset({"gpus"}))
    assert inventory_live.dmi == Dmi("NVIDIA", "DGXH100", "DGXH100", "NVIDIA")
    assert inventory_live.visibility is not None and inventory_live.visibility.slurm_job_id == "42"
    assert live.recording is not None
    capture = write_snapshot(live.recording, tmp_path / "capture", host="n1", captured_at="2026-11-21T22:40:00Z",
                             boot_id=None, version="test")
    with open_snapshot(capture) as snapshot:
        replayed = build_inventory(snapshot, needs=frozenset({"gpus"}))
    assert replayed.dmi == inventory_live.dmi
    assert replayed.visibility == inventory_live.visibility


def test_the_pack_keys_exist_in_every_bundled_platform_pack() -> None:
    for name in ("default", "dgx-h100", "hgx-a100", "pcie-only"):
        section = pack(name).section(CHECK)
        assert {"gpus", "nvswitches", "compute_nics", "missing_severity", "platforms"} <= set(section)
        assert section["platforms"]["DGXH100"]["gpus"] == 8


def test_a_site_pins_and_changes_platform_numbers_through_its_override_file(tmp_path: Path) -> None:
    from inventory_factory import site_pack

    pinned = site_pack(tmp_path, "default", "[inventory]\ngpus = 8\n")
    node = dgx(product=None, switches=0, gpus_on_bus=7, nvml_gpus=7)
    finding = only(run_check(inventory, CHECK, node, rule_pack=pinned), "node", Status.FAIL)
    assert finding.summary == "7 GPUs on the PCI bus, the pack 'default' pins gpus = 8"
    fewer_rails = site_pack(tmp_path, "dgx-h100", "[inventory.platforms.DGXH100]\ncompute_nics = 4\n")
    node = dgx()
    node.hcas = node.hcas[4:]
    assert statuses(run_check(inventory, CHECK, node, rule_pack=fewer_rails)) == [("pass", "node")] * 3
