"""Realistic node variations a reviewer met in the field, judged end to end from snapshots.

Each test copies a committed fixture into tmp_path and changes what the variation changes
(a storage card in InfiniBand mode, an SR-IOV VF, a 25GbE management NIC on a PCIe GPU
node, ...), then runs the whole pipeline (`run_check` on the snapshot, no probe).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from netdoctor.report.model import Finding, Grade, Report, Status
from netdoctor.run import CheckOptions, run_check

NODES = Path(__file__).parent / "fixtures" / "nodes"
IB_TOOLS = ("ibstat", "iblinkinfo")


def copy_fixture(name: str, tmp_path: Path) -> Path:
    root = tmp_path / name
    shutil.copytree(NODES / name, root, symlinks=True)
    return root


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def mark_missing(root: Path, *names: str) -> None:
    """The tool is not installed: its recorded output would contradict the changed sysfs."""
    commands = root / "commands"
    wanted = set(names) | {path.name.removesuffix(".status") for path in commands.glob("perfquery-*.status")}
    for name in wanted:
        for suffix in (".out", ".err"):
            (commands / f"{name}{suffix}").unlink(missing_ok=True)
        (commands / f"{name}.status").write_text("missing\n")


def judge(root: Path, rules: str | None = None) -> Report:
    return run_check(CheckOptions(snapshot=root, no_probe=True, rules=rules), env={})


def findings(report: Report, check: str, subject: str) -> list[Finding]:
    return [finding for finding in report.findings if finding.check == check and finding.subject == subject]


def one(report: Report, check: str, subject: str) -> Finding:
    found = findings(report, check, subject)
    assert len(found) == 1, found
    return found[0]


def graded(report: Report) -> list[tuple[str, str, str]]:
    return sorted((finding.check, str(finding.status), finding.subject) for finding in report.findings
                  if finding.status not in (Status.PASS, Status.SKIP))


def test_dgx_storage_card_in_ib_mode_with_its_second_port_uncabled_passes(tmp_path: Path) -> None:
    # DGX H100's dual-port ConnectX-7 storage card (mlx5_1/mlx5_2, NODE to the GPUs) in InfiniBand
    # mode at NDR200 2X, second port never cabled: not a degraded rail, not a down rail.
    root = copy_fixture("dgx-h100", tmp_path)
    mark_missing(root, *IB_TOOLS)
    for hca in ("mlx5_1", "mlx5_2"):
        port = f"sys/class/infiniband/{hca}/ports/1"
        write(root, f"{port}/link_layer", "InfiniBand")
        write(root, f"{port}/rate", "200 Gb/sec (2X NDR)")
        write(root, f"{port}/lid", "0x70" if hca == "mlx5_1" else "0x0")
        write(root, f"{port}/sm_lid", "0x1" if hca == "mlx5_1" else "0x0")
    uncabled = "sys/class/infiniband/mlx5_2/ports/1"
    write(root, f"{uncabled}/state", "1: DOWN")
    write(root, f"{uncabled}/phys_state", "2: Polling")
    for counter in (root / uncabled / "counters").iterdir():
        counter.write_text("0\n")

    report = judge(root)
    assert report.rules == "dgx-h100"
    assert graded(report) == [] and str(report.grade) == "pass"
    down = one(report, "port-state", "mlx5_2:1")
    assert down.status is Status.SKIP
    assert down.summary == ("DOWN/Polling: never linked since counters were cleared: not cabled by design "
                            "(sibling port mlx5_1:1 is ACTIVE)")
    assert down.evidence["port_class"] == "storage" and down.evidence["active_sibling_ports"] == ["mlx5_1:1"]
    assert down.evidence["link_downed"] == 0 and down.evidence["port_xmit_data"] == 0
    storage = one(report, "link-speed", "mlx5_1:1")
    assert storage.status is Status.PASS and storage.evidence["port_class"] == "storage"
    assert storage.evidence["gpu_proximity"].startswith("no GPU at PIX/PXB in nvidia-smi topo -m")
    rail = one(report, "link-speed", "mlx5_0:1")
    assert rail.evidence["gpu_proximity"] == "PIX to GPU0 in nvidia-smi topo -m"


def test_dgx_compute_rail_down_still_fails_even_when_never_linked(tmp_path: Path) -> None:
    root = copy_fixture("dgx-h100", tmp_path)
    mark_missing(root, *IB_TOOLS)
    rail = "sys/class/infiniband/mlx5_3/ports/1"
    write(root, f"{rail}/state", "1: DOWN")
    write(root, f"{rail}/phys_state", "2: Polling")
    for counter in (root / rail / "counters").iterdir():
        counter.write_text("0\n")
    report = judge(root)
    failed = one(report, "port-state", "mlx5_3:1")
    assert failed.status is Status.FAIL and "mlxlink -d mlx5_3" in (failed.remedy or "")
    assert str(report.grade) == "fail"


def test_administratively_disabled_port_fails_as_a_rail_and_is_skipped_without_a_rail_pack(tmp_path: Path) -> None:
    root = copy_fixture("dgx-h100", tmp_path)
    mark_missing(root, *IB_TOOLS)
    write(root, "sys/class/infiniband/mlx5_11/ports/1/state", "1: DOWN")
    write(root, "sys/class/infiniband/mlx5_11/ports/1/phys_state", "3: Disabled")
    on_dgx = one(judge(root), "port-state", "mlx5_11:1")
    assert on_dgx.status is Status.FAIL
    assert on_dgx.summary == "DOWN/Disabled: the port is administratively disabled"
    assert "mlxlink -d mlx5_11 -a UP" in (on_dgx.remedy or "")
    on_default = one(judge(root, "default"), "port-state", "mlx5_11:1")
    assert on_default.status is Status.SKIP
    assert on_default.summary == "DOWN/Disabled: administratively disabled (phys state Disabled)"


def test_dgx_ethernet_storage_ports_without_pfc_are_not_judged_as_roce(tmp_path: Path) -> None:
    root = copy_fixture("dgx-h100", tmp_path)
    for netdev in ("enp41s0f0np0", "enp41s0f1np1"):
        write(root, f"sys/class/net/{netdev}/mtu", "1500")
        qos = root / f"commands/mlnx_qos-{netdev}.out"
        text = qos.read_text().replace("Priority trust state: dscp", "Priority trust state: pcp")
        qos.write_text(text.replace("enabled     0   0   0   1", "enabled     0   0   0   0"))
    report = judge(root)
    assert graded(report) == [] and str(report.grade) == "pass"
    skipped = one(report, "pfc-ecn", "enp41s0f0np0")
    assert skipped.status is Status.SKIP
    assert skipped.summary == ("mlx5_1:1: port class 'storage' is not a RoCE compute rail (role storage); "
                               "PFC/ECN not judged")
    assert one(report, "mtu", "enp41s0f1np1").status is Status.SKIP
    # The default pack has no classes: every RDMA Ethernet port is taken as RoCE and judged.
    plain = judge(root, "default")
    assert {finding.status for finding in findings(plain, "pfc-ecn", "enp41s0f0np0")} == {Status.FAIL, Status.WARN}
    assert one(plain, "mtu", "enp41s0f0np0").status is Status.WARN


def add_management_nic(root: Path) -> None:
    """A ConnectX-6 Lx (MT4127) 25GbE port at 0000:c3:00.0 behind eno1: RDMA-capable, not a fabric."""
    base = "sys/class/infiniband/mlx5_0"
    write(root, f"{base}/hca_type", "MT4127")
    write(root, f"{base}/fw_ver", "26.39.1002")
    write(root, f"{base}/node_guid", "a088:c203:0061:38eb")
    write(root, f"{base}/sys_image_guid", "a088:c203:0061:38eb")
    write(root, f"{base}/board_id", "MT_0000000838")
    os.symlink("../../../bus/pci/devices/0000:c3:00.0", root / base / "device")
    port = f"{base}/ports/1"
    for name, value in (("state", "4: ACTIVE"), ("phys_state", "5: LinkUp"), ("rate", "25 Gb/sec (1X EDR)"),
                        ("link_layer", "Ethernet"), ("lid", "0x0"), ("sm_lid", "0x0"), ("lid_mask_count", "0"),
                        ("gid_attrs/ndevs/1", "eno1"), ("gid_attrs/types/1", "RoCE v2")):
        write(root, f"{port}/{name}", value)
    for counter in ("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors", "port_xmit_discards",
                    "port_xmit_data", "port_rcv_data"):
        write(root, f"{port}/counters/{counter}", "0")
    write(root, "commands/mlnx_qos-eno1.status", "missing")


def test_pcie_gpu_node_with_an_rdma_capable_management_nic_gets_pcie_only_and_passes(tmp_path: Path) -> None:
    root = copy_fixture("pcie-only", tmp_path)
    add_management_nic(root)
    report = judge(root)
    assert report.rules == "pcie-only"
    assert graded(report) == [] and str(report.grade) == "pass"
    assert one(report, "port-state", "mlx5_0:1").status is Status.PASS
    assert one(report, "pfc-ecn", "eno1").summary == (
        "mlx5_0:1: port class 'management' is not a RoCE compute rail (role management); PFC/ECN not judged")
    assert one(report, "mtu", "eno1").status is Status.SKIP
    assert one(report, "gpu-nic-affinity", "node").status is Status.SKIP


def test_sriov_virtual_function_is_judged_through_its_physical_function(tmp_path: Path) -> None:
    root = copy_fixture("dgx-h100", tmp_path)
    mark_missing(root, *IB_TOOLS)
    pf_device = root / "sys/bus/pci/devices/0000:18:00.0"
    vf_device = root / "sys/bus/pci/devices/0000:18:00.1"
    vf_device.mkdir()
    for name in ("class", "vendor", "numa_node"):
        shutil.copy(pf_device / name, vf_device / name)
    write(root, "sys/bus/pci/devices/0000:18:00.1/device", "0x101e")
    os.symlink("../0000:18:00.0", vf_device / "physfn")
    base = "sys/class/infiniband/mlx5_12"
    write(root, f"{base}/hca_type", "MT4126")
    write(root, f"{base}/fw_ver", "28.39.1002")
    write(root, f"{base}/node_guid", "a088:c203:0099:0001")
    os.symlink("../../../bus/pci/devices/0000:18:00.1", root / base / "device")
    # A VF's logical port is DOWN until the vport is configured, over the PF's LinkUp.
    for name, value in (("state", "1: DOWN"), ("phys_state", "5: LinkUp"), ("rate", "400 Gb/sec (4X NDR)"),
                        ("link_layer", "InfiniBand"), ("lid", "0x0"), ("sm_lid", "0x1")):
        write(root, f"{base}/ports/1/{name}", value)

    report = judge(root)
    assert graded(report) == [] and str(report.grade) == "pass"
    note = "SR-IOV virtual function of 0000:18:00.0 (mlx5_0): judged through its physical function"
    assert one(report, "port-state", "mlx5_12:1").summary == f"DOWN/LinkUp; {note}"
    assert one(report, "link-speed", "mlx5_12:1").summary == note
    assert one(report, "error-counters", "mlx5_12:1").status is Status.SKIP
    assert one(report, "pcie-link", "0000:18:00.1").summary == f"mlx5_12: {note}"
    assert one(report, "mtu", "mlx5_12:1").status is Status.SKIP
    assert one(report, "port-state", "mlx5_0:1").status is Status.PASS


def test_mellanox_hca_without_a_device_link_is_unknown_for_pcie_link(tmp_path: Path) -> None:
    root = copy_fixture("dgx-h100", tmp_path)
    (root / "sys/class/infiniband/mlx5_0/device").unlink()
    report = judge(root)
    finding = one(report, "pcie-link", "mlx5_0")
    assert finding.status is Status.UNKNOWN
    assert finding.summary == "mlx5_0 (MT4129): PCI address unknown (no device link in sysfs)"
    assert str(report.grade) == "unknown"     # pcie-link is required on dgx-h100


def test_nic_below_its_maximum_pcie_speed_warns_by_default_and_fails_on_dgx(tmp_path: Path) -> None:
    root = copy_fixture("dgx-h100", tmp_path)
    address = os.readlink(root / "sys/class/infiniband/mlx5_5/device").rsplit("/", 1)[-1]
    write(root, f"sys/bus/pci/devices/{address}/current_link_speed", "16.0 GT/s PCIe")
    on_dgx = one(judge(root), "pcie-link", address)
    assert on_dgx.status is Status.FAIL
    on_default = one(judge(root, "default"), "pcie-link", address)
    assert on_default.status is Status.WARN
    assert on_default.summary.endswith("below the card's maximum 32 GT/s Gen5 x16: a slower slot, "
                                       "or a link that trained down")
    assert f"lspci -vv -s {address}" in (on_default.remedy or "")


def test_degraded_rail_names_the_device_and_the_could_be_rate() -> None:
    report = judge(NODES / "dgx-h100-port-hdr")
    finding = one(report, "link-speed", "mlx5_5:1")
    assert finding.summary == ("port runs at 200 Gb/s (4X HDR), expected 400 Gb/s (4X NDR) (port class 'compute'); "
                               "iblinkinfo says the link could run at 400 Gb/s (4X NDR)")
    assert "mlxlink -d mlx5_5" in (finding.remedy or "") and "<hca>" not in (finding.remedy or "")


def test_rail_nic_missing_from_the_rdma_stack_fails_on_a_dgx(tmp_path: Path) -> None:
    """mlx5_11 is still in nvidia-smi's PCIe matrix but no longer an RDMA device (driver not
    bound, card failed): GPU7 has lost its rail, which on a DGX is a fail, not a pass."""
    root = copy_fixture("dgx-h100", tmp_path)
    shutil.rmtree(root / "sys" / "class" / "infiniband" / "mlx5_11")
    mark_missing(root, "ibstat", "ibv_devinfo-v", "ibdev2netdev", "iblinkinfo")
    report = judge(root)
    gpu7 = [finding for finding in report.findings if finding.check == "gpu-nic-affinity" and finding.subject == "GPU7"]
    assert [finding.status for finding in gpu7] == [Status.FAIL]
    assert report.grade is Grade.FAIL
