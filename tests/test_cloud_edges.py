"""Edges of the cloud-fabric support found in review: a node with EFA and ConnectX both, EFA
devices whose PCI functions were not read, GPU NICs whose speed or MTU cannot be read, and the
discovery plan of a single RDMA check (no PCIe tree, no lspci for `--only port-state`)."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

from inventory_factory import dgx_h100, efa_hca, efa_node, h100_gpus, run_check
from netdoctor.inventory.model import PeerMemory
from netdoctor.inventory.plan import Plan
from netdoctor.parsers.fi_info import FiProvider
from netdoctor.report.model import Status
from netdoctor_plugins.gpudirect import gpudirect
from netdoctor_plugins.port_state import port_state

REPO = Path(__file__).resolve().parent.parent
NODES = REPO / "tests" / "fixtures" / "nodes"


def _cli(snapshot: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "netdoctor", "check", "--snapshot", str(snapshot), "--no-probe",
                           "--format", "json", *args], cwd=REPO, capture_output=True, text=True, timeout=120)


def _copy(name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copytree(NODES / name, target, symlinks=True)
    return target


# gpudirect: one EFA device hides a Mellanox NIC that has no GPUDirect path at all.
def test_gpudirect_mixed_efa_and_mlx_still_judges_the_mlx_path() -> None:
    gpus = h100_gpus()
    for item in gpus:
        item.dmabuf_supported = False
    no_peer = PeerMemory(nvidia_peermem=False, nv_peer_mem=False, gdrdrv=False)
    mlx_only = dgx_h100(gpus=copy.deepcopy(gpus), peer_memory=no_peer)
    assert [f.status for f in run_check(gpudirect, "gpudirect", mlx_only)] == [Status.FAIL]   # baseline
    mixed = dgx_h100(gpus=copy.deepcopy(gpus), peer_memory=no_peer)
    extra = efa_hca(0, 0)
    mixed.hcas.append(extra)
    mixed.libfabric_providers = (FiProvider("efa", "efa", f"{extra.name}-rdm", "122.0", "FI_EP_RDM", "FI_PROTO_EFA"),)
    statuses = [f.status for f in run_check(gpudirect, "gpudirect", mixed)]
    assert Status.FAIL in statuses, f"8 ConnectX-7 rails without peermem/DMA-BUF pass because one EFA exists: {statuses}"


# port-state: an EFA device whose PCI address is unknown makes its own, bound, function "unbound".
def test_bound_efa_without_known_pci_address_is_not_failed_as_unbound() -> None:
    inventory = efa_node()
    inventory.pci_efa = {hca.pci_address: "0xefa1" for hca in inventory.hcas}
    for hca in inventory.hcas:
        hca.pci_address = None       # e.g. no class/infiniband/DEV/device link, no uevent
    findings = run_check(port_state, "port-state", inventory, pack_name="aws-p5")
    failed = [f.subject for f in findings if f.status is Status.FAIL]
    assert not failed, f"{len(failed)} healthy, bound EFA devices failed as unbound: {failed[:3]}"


def test_bound_efa_without_device_link_cli(tmp_path: Path) -> None:
    snapshot = _copy("aws-p5", tmp_path)
    for link in (snapshot / "sys" / "class" / "infiniband").glob("*/device"):
        link.unlink()
    report = json.loads(_cli(snapshot, "--only", "port-state").stdout)
    failed = [f for f in report["findings"] if f["status"] == "fail"]
    assert not failed, f"{len(failed)} port-state fails on a healthy p5: {failed[0]['summary']}"


# fabric-netdevs passes a GPU NIC whose speed and MTU could not be read (pack expects 200 Gb/s, 8244).
def test_fabric_netdevs_does_not_pass_unknown_speed_or_mtu(tmp_path: Path) -> None:
    snapshot = _copy("gcp-a3-high", tmp_path)
    for index in (1, 2, 3, 4):
        (snapshot / "sys" / "class" / "net" / f"eth{index}" / "speed").unlink()
        (snapshot / "sys" / "class" / "net" / f"eth{index}" / "mtu").unlink()
    report = json.loads(_cli(snapshot, "--only", "fabric-netdevs").stdout)
    passed = [f"{f['subject']}: {f['summary']}" for f in report["findings"] if f["status"] == "pass"]
    assert not passed, f"judged without data: {passed}"


# The rdma need now implies pcie-tree (lspci -vvv) and nccl-env for every RDMA check on every node.
def test_rdma_only_plan_does_not_run_lspci() -> None:
    plan = Plan.of(frozenset({"rdma"}), fabric_scan=False, is_snapshot=False)
    assert not plan.wants("lspci-vvv"), "check --only port-state/mtu/link-speed now runs `lspci -vvv` on a DGX"


def test_the_plans_of_gpudirect_and_gpu_nic_affinity_read_what_efa_needs() -> None:
    gpudirect_plan = Plan.of(frozenset({"gpus", "rdma", "efa"}), fabric_scan=False, is_snapshot=False)
    assert gpudirect_plan.wants("nccl-env") and gpudirect_plan.wants("fi_info-p-efa")
    assert not gpudirect_plan.wants("lspci-vvv")
    placement = Plan.of(frozenset({"gpus", "rdma", "placement"}), fabric_scan=False, is_snapshot=False)
    assert placement.serves("pcie-tree")


def test_only_gpudirect_on_a_p5_judges_fi_efa_use_device_rdma(tmp_path: Path) -> None:
    snapshot = _copy("aws-p5", tmp_path)
    settings = json.loads((snapshot / "nccl-env.json").read_text())
    settings["environ"]["FI_EFA_USE_DEVICE_RDMA"] = "0"
    (snapshot / "nccl-env.json").write_text(json.dumps(settings))
    report = json.loads(_cli(snapshot, "--only", "gpudirect").stdout)
    (finding,) = report["findings"]
    assert finding["status"] == "fail" and "FI_EFA_USE_DEVICE_RDMA=0" in finding["summary"]
