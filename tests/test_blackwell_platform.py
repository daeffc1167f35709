"""Blackwell platforms: DGX/HGX B200 and B300, GB200/GB300 NVL72 trays named by SKU; their packs;
XDR rates; the ConnectX-7 bridge to the baseboard's NVSwitches never judged as a compute rail.

Real samples: the NVML name <-> PCI id pairs of `nvidia-smi -q -x` (B200, GB200, GB300), the 7-GPU
HGX B300's `nvidia-smi nvlink --status` and `ibstat` (tests/data/corpus/, PROVENANCE.tsv). The sysfs
trees below are DERIVED: shaped on that B300 ibstat (4 MT4129 bridge functions sharing one system
image GUID at Rate 100, SM lid 1 on the host) and the Fabric Manager guide's bridge (4 functions of
one PCI device, 05:00.0-3); the CX-8 rate strings are the kernel's `800 Gb/sec (4X XDR)` form.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from corpus_util import CORPUS
from inventory_factory import gpu, only, run_check
from test_parsers_vpd import FC_PF, LPF, vpd

from netdoctor.host.snapshot import open_snapshot
from netdoctor.inventory.build import build_inventory
from netdoctor.inventory.hardware import NVIDIA_GPU_MODELS
from netdoctor.inventory.model import Dmi, Inventory, LinkRate
from netdoctor.inventory.platform import node_platform
from netdoctor.packs import load_rules
from netdoctor.parsers.ibstat import parse_ibstat
from netdoctor.parsers.ibv_devinfo import parse_ibv_devinfo
from netdoctor.parsers.nccl_env import nccl_settings
from netdoctor.parsers.sysfs_values import parse_rate
from netdoctor.report.model import Status
from netdoctor_plugins.gpu_nic_affinity import compute_hcas
from netdoctor.checks.api import CheckContext
from netdoctor_plugins.inventory import inventory as inventory_check
from netdoctor_plugins.link_speed import link_speed
from netdoctor_plugins.nccl_env import nccl_env
from netdoctor_plugins.port_state import port_state

B300 = "NVIDIA B300 SXM6 AC"
B300_IBSTAT = CORPUS / "ibstat" / "dell-b300-notes__ibstat-7xMT4131-cx8-disabled-4xMT4129-nvswitch-bridge-active-rate100.txt"


def node(name: str | None, count: int, device: str, *, dmi: str | None = None) -> Inventory:
    """GPUs named by NVML (name None: NVML down, only the bus's device ids) and on the bus."""
    inventory = Inventory(host="node", captured_at="2026-11-21T22:40:00Z")
    gpus = [gpu(index) for index in range(count)]
    inventory.pci_gpus = {item.pci_address: device for item in gpus if item.pci_address}
    if name is not None:
        for item in gpus:
            item.name = name
        inventory.gpus = gpus
    inventory.dmi = Dmi("NVIDIA", dmi, None, None) if dmi else None
    return inventory


# -- real names and ids ----------------------------------------------------------------------------

@pytest.mark.parametrize("sample", ["NVIDIA-k8s-test-infra__qx-b200.first4gpus.xml", "NVIDIA-k8s-test-infra__qx-gb200.xml",
                                    "NVIDIA-k8s-test-infra__qx-gb300.xml"])
def test_the_pci_ids_name_gpus_as_nvml_does_in_real_nvidia_smi(sample: str) -> None:
    text = (CORPUS / "nvidia-smi-q-x" / sample).read_text()
    names = re.findall(r"<product_name>(.*?)</product_name>", text)
    ids = re.findall(r"<pci_device_id>([0-9A-F]{4})10DE</pci_device_id>", text)
    assert len(names) == len(ids) == 4
    assert [NVIDIA_GPU_MODELS[f"0x{device.lower()}"] for device in ids] == names


def test_a_real_b300_with_7_gpus_is_still_an_hgx_b300() -> None:
    text = (CORPUS / "nvidia-smi-nvlink" / "dell-xe9780-doc-63125688786__b300-sxm6-ac_7gpu_nvlink-status.txt").read_text()
    names = re.findall(r"^GPU \d+: (.+?) \(UUID", text, re.MULTILINE)
    assert names == [B300] * 7
    platform = node_platform(node(B300, 7, "0x3182"))
    assert platform is not None and platform.id == "HGX_B300_8GPU" and "not on the PCI bus" in platform.basis


# -- platforms -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "count", "device", "dmi", "expected"), [
    ("NVIDIA B200", 8, "0x2901", None, "HGX_B200_8GPU"),        # no NVSwitch on the bus: none ever is
    (None, 8, "0x2901", None, "HGX_B200_8GPU"),                 # NVML down: by PCI device id
    ("NVIDIA B200", 6, "0x2901", "DGXB200", "DGXB200"),
    (B300, 8, "0x3182", None, "HGX_B300_8GPU"),
    (None, 7, "0x3182", None, "HGX_B300_8GPU"),
    ("NVIDIA GB200", 4, "0x2941", None, "GB200_NVL72"),
    (None, 4, "0x2941", None, "GB200_NVL72"),
    ("NVIDIA GB300", 4, "0x31c2", None, "GB300_NVL72"),
    (None, 3, "0x31c3", None, "GB300_NVL72"),
])
def test_blackwell_platforms_are_named_by_sku(name: str | None, count: int, device: str, dmi: str | None,
                                              expected: str) -> None:
    platform = node_platform(node(name, count, device, dmi=dmi))
    assert platform is not None and platform.id == expected


def test_hopper_still_needs_its_nvswitches_on_the_bus() -> None:
    assert node_platform(node("NVIDIA H100 80GB HBM3", 8, "0x2330")) is None


# -- sysfs trees (derived) -------------------------------------------------------------------------

def _write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text + "\n")


def _function(root: Path, address: str, vendor: str, device: str, pci_class: str, vpd_bytes: bytes | None = None) -> None:
    base = root / "sys" / "devices" / "pci0000:00" / address
    for name, value in (("vendor", vendor), ("device", device), ("class", pci_class), ("numa_node", "0")):
        _write(base / name, value)
    if vpd_bytes is not None:
        _write(base / "vpd", vpd_bytes)
    link = root / "sys" / "bus" / "pci" / "devices" / address
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(f"../../../devices/pci0000:00/{address}", link)


def _hca(root: Path, name: str, address: str, ca_type: str, device: str, guid: str, *, rate: str, lid: int,
         sm_lid: int, link_layer: str = "InfiniBand", active: bool = True, vpd_bytes: bytes | None = None) -> None:
    _function(root, address, "0x15b3", device, "0x020700", vpd_bytes)
    base = root / "sys" / "class" / "infiniband" / name
    for key, value in (("hca_type", ca_type), ("sys_image_guid", guid), ("node_guid", guid), ("fw_ver", "28.47.2526")):
        _write(base / key, value)
    base.mkdir(parents=True, exist_ok=True)
    os.symlink(f"../../../bus/pci/devices/{address}", base / "device")
    port = base / "ports" / "1"
    for key, value in (("state", "4: ACTIVE" if active else "1: DOWN"), ("phys_state", "5: LinkUp" if active else "3: Disabled"),
                       ("rate", rate), ("link_layer", link_layer), ("lid", hex(lid)), ("sm_lid", hex(sm_lid)),
                       ("lid_mask_count", "0")):
        _write(port / key, value)


def b300_snapshot(root: Path, *, gpus: int = 7, gpu_device: str = "0x3182", with_vpd: bool = True,
                  ndr_rail: int | None = 6) -> Path:
    """An HGX B300 (derived): `gpus` B300 and as many ConnectX-8 XDR rails mlx5_0.., one at NDR, and
    the bridge mlx5_20..23 at 0000:05:00.0-3 (LPFs .1/.3 with SMDL=SW_MNG when `with_vpd`)."""
    _write(root / "snapshot.json", json.dumps({"format": "netdoctor.snapshot/1", "host": "b300-07",
                                               "captured_at": "2026-11-21T22:40:00Z", "netdoctor": "0.1.0"}))
    (root / "commands").mkdir(parents=True)
    for index in range(gpus):
        _function(root, f"0000:{0x1a + index * 0x10:02x}:00.0", "0x10de", gpu_device, "0x030200")
        rate = "400 Gb/sec (4X NDR)" if index == ndr_rail else "800 Gb/sec (4X XDR)"
        _hca(root, f"mlx5_{index}", f"0000:{0x1c + index * 0x10:02x}:00.0", "MT4131", "0x1023",
             f"7425:5403:0035:3e{index:x}d", rate=rate, lid=0x100 + index, sm_lid=0x2)
    for function in range(4):
        payload = vpd(LPF if function % 2 else FC_PF) if with_vpd else None
        _hca(root, f"mlx5_{20 + function}", f"0000:05:00.{function}", "MT4129", "0x1021", "7425:5403:0035:3de9",
             rate="100 Gb/sec (4X EDR)", lid=1 + function, sm_lid=1, vpd_bytes=payload)
    return root


def _built(path: Path) -> Inventory:
    with open_snapshot(path) as source:
        return build_inventory(source)


BRIDGE = [f"mlx5_{20 + function}" for function in range(4)]


def test_the_bridge_is_read_from_its_vpd_and_its_full_pfs_go_with_it(tmp_path: Path) -> None:
    inventory = _built(b300_snapshot(tmp_path / "snap"))
    assert [inventory.hca(name).switch_management for name in BRIDGE] == [True] * 4   # FC PFs: siblings of the LPFs
    assert {inventory.hca(f"mlx5_{index}").switch_management for index in range(7)} == {None}   # CX-8: VPD not read
    rule_pack = load_rules(None, inventory, env={})
    assert rule_pack.name == "hgx-b300"
    assert [port_class.name for _hca, _port, port_class in rule_pack.classified_ports(inventory)
            if _hca.name in BRIDGE] == ["nvswitch-management"] * 4


def test_without_vpd_the_bridge_is_inferred_only_on_a_b200_b300_board(tmp_path: Path) -> None:
    inventory = _built(b300_snapshot(tmp_path / "b300", with_vpd=False))
    assert [inventory.hca(name).switch_management for name in BRIDGE] == [True] * 4
    hopper = _built(b300_snapshot(tmp_path / "h100", with_vpd=False, gpu_device="0x2330"))
    assert [hopper.hca(name).switch_management for name in BRIDGE] == [None] * 4


@pytest.mark.parametrize("with_vpd", [True, False])
def test_bridge_ports_are_no_rails_and_a_cx8_at_ndr_is_degraded(tmp_path: Path, with_vpd: bool) -> None:
    inventory = _built(b300_snapshot(tmp_path / "snap", with_vpd=with_vpd))
    findings = run_check(link_speed, "link-speed", inventory, pack_name="hgx-b300")
    for name in BRIDGE:
        finding = only(findings, f"{name}:1")
        assert finding.status is Status.PASS and finding.evidence["role"] == "management"
    degraded = only(findings, "mlx5_6:1")
    assert degraded.status is Status.FAIL and "expected 800 Gb/s (4X XDR)" in degraded.summary
    assert only(findings, "mlx5_0:1").status is Status.PASS
    # port-state: the bridge's SM (the host's NVLSM) is another fabric than the rails': no mismatch.
    states = run_check(port_state, "port-state", inventory, pack_name="hgx-b300")
    assert not [finding for finding in states if finding.status is not Status.PASS]
    # NCCL_IB_HCA naming the seven rails leaves nothing out.
    inventory.nccl = nccl_settings({"NCCL_IB_HCA": "=" + ",".join(f"mlx5_{index}" for index in range(7))}, {}, "/root")
    assert not [finding for finding in run_check(nccl_env, "nccl-env", inventory, pack_name="hgx-b300")
                if finding.status is not Status.PASS]
    context = CheckContext("gpu-nic-affinity", inventory, load_rules("hgx-b300", env={}))
    assert not set(compute_hcas(context)) & set(BRIDGE)
    # inventory: 7 of 8 GPUs and 7 of 8 rails, the bridge not counted as a rail.
    counted = run_check(inventory_check, "inventory", inventory, pack_name="hgx-b300")
    failed = " | ".join(finding.summary for finding in counted if finding.status is Status.FAIL)
    assert "7 GPUs on the PCI bus, HGX B300 8-GPU has 8" in failed
    assert "7 compute NICs with an RDMA device, HGX B300 8-GPU has 8" in failed and "mlx5_20" not in failed


def test_the_bridge_is_no_rail_under_a_pack_written_before_blackwell(tmp_path: Path) -> None:
    inventory = _built(b300_snapshot(tmp_path / "snap"))
    findings = run_check(link_speed, "link-speed", inventory, pack_name="default")
    assert only(findings, "mlx5_20:1").evidence["port_class"] == "nvswitch-management"
    assert only(findings, "mlx5_0:1").evidence["port_class"] is None


# -- packs by SKU ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("gpu_device", "ca_type", "device", "expected"), [
    ("0x3182", "MT4131", "0x1023", "hgx-b300"),
    ("0x2901", "MT4129", "0x1021", "hgx-b200"),
])
def test_hgx_packs_are_chosen_by_sku(tmp_path: Path, gpu_device: str, ca_type: str, device: str, expected: str) -> None:
    root = b300_snapshot(tmp_path / "snap", gpu_device=gpu_device, ndr_rail=None)
    for path in (root / "sys" / "class" / "infiniband").glob("mlx5_[0-6]"):
        _write(path / "hca_type", ca_type)
        (root / "sys" / "bus" / "pci" / "devices" / os.readlink(path / "device").rpartition("/")[2] / "device").write_text(
            device + "\n")
        _write(path / "ports" / "1" / "rate", "400 Gb/sec (4X NDR)")
    inventory = _built(root)
    assert load_rules(None, inventory, env={}).name == expected


def test_tray_packs_are_chosen_by_sku_and_not_for_another_fabric() -> None:
    from inventory_factory import efa_hca, ib_hca, storage_hca
    gb200 = node("NVIDIA GB200", 4, "0x2941")
    gb200.hcas = [ib_hca(index) for index in range(4)] + [storage_hca()]
    assert load_rules(None, gb200, env={}).name == "gb200-nvl72"
    gb300 = node("NVIDIA GB300", 4, "0x31c2")
    gb300.hcas = [ib_hca(index) for index in range(4)]
    for hca in gb300.hcas:
        hca.ca_type = "MT4131"
        hca.ports[1].rate = LinkRate(800, 4, "XDR", 212.5)
    assert load_rules(None, gb300, env={}).name == "gb300-nvl72"
    findings = run_check(link_speed, "link-speed", gb300, pack_name="gb300-nvl72")
    assert {finding.status for finding in findings} == {Status.PASS}
    efa = node("NVIDIA GB200", 4, "0x2941")
    efa.hcas = [efa_hca(index, 0) for index in range(4)]
    assert load_rules(None, efa, env={}).name != "gb200-nvl72"


# -- XDR -------------------------------------------------------------------------------------------

def test_xdr_from_sysfs_ibstat_and_ibv_devinfo() -> None:
    assert parse_rate("800 Gb/sec (4X XDR)\n") == LinkRate(800.0, 4, "XDR", 212.5)
    # ibstat: the real B300's first ConnectX-8 block, brought up at XDR (DERIVED: state and rate edited).
    block = B300_IBSTAT.read_text().split("CA 'mlx5_1'")[0]
    block = (block.replace("State: Down", "State: Active").replace("Physical state: Disabled", "Physical state: LinkUp")
             .replace("Rate: 10\n", "Rate: 800\n"))
    (cx8,) = parse_ibstat(block)
    assert cx8.ca_type == "MT4131" and cx8.ports[0].rate_gbps == 800
    # ibv_devinfo: rdma-core prints XDR lanes as `200.0 Gbps (256)` (no real CX-8 capture: DERIVED).
    text = ("hca_id:\tmlx5_0\n\ttransport:\t\t\tInfiniBand (0)\n\tvendor_part_id:\t\t\t4131\n\tphys_port_cnt:\t\t\t1\n"
            "\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tactive_width:\t\t4X (2)\n"
            "\t\t\tactive_speed:\t\t200.0 Gbps (256)\n\t\t\tlink_layer:\t\tInfiniBand\n")
    (device,) = parse_ibv_devinfo(text)
    assert device.ports[0].rate == LinkRate(800.0, 4, "XDR", 212.5)


def test_the_real_b300_ibstat_has_the_bridge_at_100_and_its_cx8_down() -> None:
    cas = parse_ibstat(B300_IBSTAT.read_text())
    bridge = [ca for ca in cas if ca.ca_type == "MT4129"]
    assert len(bridge) == 4 and {ca.sys_image_guid for ca in bridge} == {"0x7425540300353de9"}
    assert {ca.ports[0].rate_gbps for ca in bridge} == {100}
    assert {ca.ports[0].rate_gbps for ca in cas if ca.ca_type == "MT4131"} == {10}


def test_the_bridge_ports_own_subnet_manager_is_not_a_second_fabric_under_any_pack() -> None:
    """The NVSwitch bridge's ports see the host's NVLink subnet manager (SM LID 1 on the real B300
    ibstat), the rails the compute fabric's: under `sm_scope = "node"` (default) that is no mismatch."""
    from inventory_factory import dgx_h100, ib_port

    from netdoctor.inventory.model import Hca
    from netdoctor_plugins.port_state import port_state

    def node(bridge_marked: bool) -> Inventory:
        inventory = dgx_h100(storage=None)
        for hca in inventory.hcas:
            hca.ca_type = "MT4131"
            for port in hca.ports.values():
                port.sm_lid = 0x5
        for index in range(4):
            port = ib_port(f"mlx5_b{index}", lid=index + 1)
            port.sm_lid = 1
            port.rate = LinkRate(100, 4, "EDR", 25.78125)
            inventory.hcas.append(Hca(name=f"mlx5_b{index}", ca_type="MT4129", pci_address=f"0000:05:00.{index}",
                                      sys_image_guid="0xabc", switch_management=bridge_marked, ports={1: port}))
        return inventory

    def sm_findings(inventory: Inventory) -> list[str]:
        return [finding.status.value for finding in run_check(port_state, "port-state", inventory, pack_name="default")
                if finding.subject == "node" and "SM LID" in finding.summary]

    assert sm_findings(node(bridge_marked=True)) == ["pass"]
    assert sm_findings(node(bridge_marked=False)) == ["warn"]      # an unmarked second SM is still a finding
