"""GCP A3 GPUDirect-TCPX/TCPXO (issue 14): the GPU NICs are gVNICs (driver gve) on the GPUs'
PCIe switches. Their discovery, pack selection (a3-high / a3-mega), the fabric-netdevs check,
nccl-env's TCPX settings, and the RDMA checks skipping, on tests/fixtures/nodes/gcp-a3-high
and copies of its inventory changed one fault at a time. See docs/cloud.md."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from inventory_factory import dgx_h100, only, run_check
from netdoctor.cli import run_cli
from netdoctor.inventory import queries
from netdoctor.inventory.model import Dmi, Inventory, Netdev
from netdoctor.packs import load_rules
from netdoctor.parsers.nccl import parse_nccl_log
from netdoctor.parsers.nccl_env import nccl_settings
from netdoctor.probe.engine import net_plugin_of
from netdoctor.report.model import Finding, Status
from netdoctor.run import discover, open_source
from netdoctor_plugins.fabric_netdevs import fabric_netdevs
from netdoctor_plugins.nccl_env import nccl_env

REPO = Path(__file__).resolve().parents[1]
A3_HIGH = REPO / "tests" / "fixtures" / "nodes" / "gcp-a3-high"
GPU_NICS = {"eth1": ["GPU0", "GPU1"], "eth2": ["GPU2", "GPU3"], "eth3": ["GPU4", "GPU5"], "eth4": ["GPU6", "GPU7"]}
TCPX_README_LOG = REPO / "tests" / "data" / "corpus" / "nccl-log" / "skypilot__gcp_gpu_direct_tcpx-readme_success-lines.txt"
RDMA_CHECKS = ("port-state", "link-speed", "mtu", "pfc-ecn", "gpudirect", "gpu-nic-affinity", "error-counters",
               "transceiver")


@pytest.fixture(scope="module")
def a3_high_fixture() -> Inventory:
    with open_source(A3_HIGH) as source:
        return discover(source, deadline=time.monotonic() + 60)


@pytest.fixture()
def a3(a3_high_fixture: Inventory) -> Inventory:
    """A copy of the gcp-a3-high inventory a test may change."""
    return copy.deepcopy(a3_high_fixture)


def netdev(inventory: Inventory, name: str) -> Netdev:
    found = inventory.netdev(name)
    assert found is not None, f"no netdev {name}"
    return found


def a3_mega(inventory: Inventory) -> Inventory:
    """The a3-high inventory with a GPU NIC per GPU: eth5..eth8 on new downstream ports of the
    switches of GPUs 1, 3, 5, 7 (the a3-mega layout), gve at 200 Gb/s."""
    tree = dict(inventory.pci_tree or {})
    for number, gpu in enumerate(sorted(inventory.gpus, key=lambda item: item.index)[1::2], start=5):
        assert gpu.pci_address is not None
        switch_port = tree[gpu.pci_address].parent
        assert switch_port is not None
        upstream = tree[switch_port].parent
        bus = int(gpu.pci_address.split(":")[1], 16)
        port_address = switch_port.rsplit(":", 1)[0] + ":1f.0"          # beside the GPU's downstream port
        nic_address = f"0000:{bus + 0x10:02x}:00.0"
        tree[port_address] = replace(tree[switch_port], address=port_address, parent=upstream)
        tree[nic_address] = replace(tree[netdev(inventory, "eth1").pci_address or ""], address=nic_address,
                                    parent=port_address)
        inventory.netdevs.append(replace(netdev(inventory, "eth1"), name=f"eth{number}", pci_address=nic_address,
                                         mac=f"42:01:c0:a8:0{number}:02", numa_node=gpu.numa_node))
    inventory.pci_tree = tree
    return inventory


def fabric(inventory: Inventory, pack_name: str = "gcp-a3-high") -> list[Finding]:
    return run_check(fabric_netdevs, "fabric-netdevs", inventory, pack_name=pack_name)


def nccl(inventory: Inventory, environ: dict[str, str] | None = None) -> list[Finding]:
    if environ is not None:
        inventory.nccl = nccl_settings(environ, {})
    return run_check(nccl_env, "nccl-env", inventory, pack_name="gcp-a3-high")


def tcpx_environ(**changes: str) -> dict[str, str]:
    environ = {"NCCL_GPUDIRECTTCPX_SOCKET_IFNAME": "eth1,eth2,eth3,eth4", "NCCL_GPUDIRECTTCPX_CTRL_DEV": "eth0",
               "NCCL_SOCKET_IFNAME": "eth0"}
    environ.update(changes)
    return environ


_REPORT: dict[str, Any] = {}


def cli_report() -> dict[str, Any]:
    """`netdoctor check --snapshot gcp-a3-high --no-probe --format json`, in-process, once."""
    if not _REPORT:
        stdout, stderr = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = run_cli(["check", "--snapshot", str(A3_HIGH), "--no-probe", "--format", "json"])
        _REPORT.update(json.loads(stdout.getvalue()), exit_code=code)
    return _REPORT


# -- discovery -------------------------------------------------------------------------------

def test_gpu_nics_are_gve_netdevs_with_a_numa_node(a3: Inventory) -> None:
    for name, numa in (("eth1", 0), ("eth2", 0), ("eth3", 1), ("eth4", 1)):
        item = netdev(a3, name)
        assert (item.driver, item.numa_node, item.operstate, item.speed_mbps, item.mtu) == ("gve", numa, "up",
                                                                                             200000, 8244)
    assert netdev(a3, "eth0").driver == "gve"           # the primary gVNIC too
    assert netdev(a3, "docker0").driver is None          # no PCI function


def test_gpu_fabric_netdevs_pairs_each_gpu_nic_with_its_gpus(a3: Inventory) -> None:
    assert queries.gpu_fabric_netdevs(a3) == GPU_NICS


def test_the_primary_gvnic_on_the_root_bus_is_not_a_gpu_nic(a3: Inventory) -> None:
    placed = queries.gpu_fabric_netdevs(a3)
    assert placed is not None and "eth0" not in placed
    assert queries.pcie_level(a3, "0000:04:00.0", netdev(a3, "eth0").pci_address or "") is None


def test_gpu_nic_and_its_gpus_are_pix_and_the_others_node_or_sys(a3: Inventory) -> None:
    eth1 = netdev(a3, "eth1").pci_address or ""
    assert queries.pcie_level(a3, "0000:04:00.0", eth1) == "PIX"      # GPU0, same switch
    assert queries.pcie_level(a3, "0000:0a:00.0", eth1) == "NODE"     # GPU2, same NUMA node
    assert queries.pcie_level(a3, "0000:84:00.0", eth1) == "SYS"      # GPU4, other socket


def test_gpu_fabric_netdevs_is_none_without_the_pcie_tree(a3: Inventory) -> None:
    a3.pci_tree = None
    assert queries.gpu_fabric_netdevs(a3) is None


def test_gpu_fabric_netdevs_is_none_on_an_rdma_node() -> None:
    assert queries.gpu_fabric_netdevs(dgx_h100()) is None


# -- pack selection --------------------------------------------------------------------------

def selected(inventory: Inventory) -> str:
    return load_rules(None, inventory, env={}).name


def test_a3_high_fixture_selects_gcp_a3_high(a3: Inventory) -> None:
    assert selected(a3) == "gcp-a3-high"


def test_eight_gpu_nics_select_gcp_a3_mega(a3: Inventory) -> None:
    mega = a3_mega(a3)
    assert len(queries.gpu_fabric_netdevs(mega) or {}) == 8
    assert selected(mega) == "gcp-a3-mega"


def test_a3_high_that_lost_a_gpu_nic_still_selects_gcp_a3_high(a3: Inventory) -> None:
    a3.netdevs = [item for item in a3.netdevs if item.name != "eth4"]
    assert selected(a3) == "gcp-a3-high"


def test_dgx_h100_selects_neither_gcp_pack() -> None:
    inventory = dgx_h100()
    inventory.dmi = Dmi("NVIDIA", "DGXH100")     # the dgx-h100 pack is for 8-GPU platforms (DMI or NVSwitches)
    assert selected(inventory) == "dgx-h100"


def test_h100_node_without_gpu_nics_selects_neither_gcp_pack(a3: Inventory) -> None:
    a3.netdevs = [replace(item, driver="ena") if item.driver == "gve" else item for item in a3.netdevs]
    assert selected(a3) not in ("gcp-a3-high", "gcp-a3-mega")


# -- fabric-netdevs --------------------------------------------------------------------------

def test_fabric_netdevs_passes_the_four_gpu_nics(a3: Inventory) -> None:
    findings = fabric(a3)
    assert [(finding.subject, finding.status) for finding in findings] == [
        (name, Status.PASS) for name in ("eth1", "eth2", "eth3", "eth4")]
    assert only(findings, "eth3").summary == "up, 200 Gb/s, MTU 8244, next to GPU4, GPU5"
    assert only(findings, "eth1").evidence["pci_address"] == "0000:06:00.0"


def test_fabric_netdevs_fails_a_gpu_nic_that_is_down(a3: Inventory) -> None:
    netdev(a3, "eth3").operstate = "down"
    findings = fabric(a3)
    finding = only(findings, "eth3")
    assert finding.status is Status.FAIL
    assert finding.summary == "GPU NIC of GPU4, GPU5 is down, not up"
    assert finding.rule == "down_severity"
    assert "ip link set eth3 up" in (finding.remedy or "")
    assert [f.subject for f in findings if f.status is not Status.PASS] == ["eth3"]


def test_fabric_netdevs_fails_a_slow_gpu_nic(a3: Inventory) -> None:
    netdev(a3, "eth2").speed_mbps = 100000
    finding = only(fabric(a3), "eth2")
    assert finding.status is Status.FAIL
    assert finding.summary == "GPU NIC runs at 100 Gb/s, expected 200 Gb/s"
    assert finding.rule == "expected_speed_mbps"
    assert finding.evidence["speed_mbps"] == 100000


def test_fabric_netdevs_warns_on_a_small_mtu(a3: Inventory) -> None:
    netdev(a3, "eth4").mtu = 1460
    finding = only(fabric(a3), "eth4")
    assert finding.status is Status.WARN
    assert finding.summary.startswith("GPU NIC MTU 1460 is below 8244")
    assert finding.rule == "min_mtu"


def test_fabric_netdevs_fails_a_missing_gpu_nic_and_the_gpus_left_without_one(a3: Inventory) -> None:
    a3.netdevs = [item for item in a3.netdevs if item.name != "eth4"]
    findings = fabric(a3)
    node = only(findings, "node", Status.FAIL)
    assert node.summary.startswith("3 of 4 GPU NICs (eth1, eth2, eth3)")
    assert node.rule == "expected_count"
    assert node.evidence["gpu_nics"] == {name: GPU_NICS[name] for name in ("eth1", "eth2", "eth3")}
    for label in ("GPU6", "GPU7"):
        finding = only(findings, label, Status.FAIL)
        assert finding.summary.startswith(f"{label} has no GPU NIC on its PCIe switch")
        assert finding.rule == "gpu_without_nic_severity"
    assert {f.subject for f in findings if f.status is Status.FAIL} == {"node", "GPU6", "GPU7"}
    assert [f.subject for f in findings if f.status is Status.PASS] == ["eth1", "eth2", "eth3"]


def test_fabric_netdevs_skips_under_the_default_pack(a3: Inventory) -> None:
    findings = fabric(a3, pack_name="default")
    assert len(findings) == 1
    assert only(findings, "node").status is Status.SKIP
    assert "expects no GPU NICs without RDMA" in findings[0].summary


def test_fabric_netdevs_unknown_without_the_pcie_tree(a3: Inventory) -> None:
    a3.pci_tree = None
    findings = fabric(a3)
    assert len(findings) == 1
    finding = only(findings, "node", Status.UNKNOWN)
    assert finding.summary.startswith("5 gVNIC(s) found, but the PCIe tree that tells GPU NICs from the primary NIC "
                                      "was not read")


def test_fabric_netdevs_unknown_without_the_tree_does_not_blame_missing_rdma(a3: Inventory) -> None:
    a3.pci_tree = None
    finding = only(fabric(a3), "node", Status.UNKNOWN)
    assert "infiniband" not in finding.summary.lower()


def test_fabric_netdevs_passes_eight_gpu_nics_under_gcp_a3_mega(a3: Inventory) -> None:
    findings = fabric(a3_mega(a3), pack_name="gcp-a3-mega")
    assert len(findings) == 8
    assert {finding.status for finding in findings} == {Status.PASS}


def test_fabric_netdevs_under_a3_mega_fails_the_a3_high_fixture(a3: Inventory) -> None:
    findings = fabric(a3, pack_name="gcp-a3-mega")
    node = only(findings, "node", Status.FAIL)
    assert node.summary.startswith("4 of 8 GPU NICs (eth1, eth2, eth3, eth4)")


# -- nccl-env --------------------------------------------------------------------------------

def test_nccl_env_passes_the_fixtures_tcpx_settings(a3: Inventory) -> None:
    findings = nccl(a3)
    assert [(finding.subject, finding.status) for finding in findings] == [("node", Status.PASS)]
    assert "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME" in findings[0].evidence["settings"]


def test_nccl_env_fails_a_tcpx_interface_that_does_not_exist(a3: Inventory) -> None:
    findings = nccl(a3, tcpx_environ(NCCL_GPUDIRECTTCPX_SOCKET_IFNAME="eth1,eth2,eth3,eth9"))
    finding = only(findings, "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME", Status.FAIL)
    assert finding.summary.endswith("names interfaces NCCL's TCPX plugin cannot use: eth9 (no such interface)")
    assert finding.rule == "socket_ifname_severity"
    assert finding.evidence["listed"] == ["eth1", "eth2", "eth3", "eth9"]


def test_nccl_env_warns_on_a_tcpx_list_that_leaves_out_a_gpu_nic(a3: Inventory) -> None:
    findings = nccl(a3, tcpx_environ(NCCL_GPUDIRECTTCPX_SOCKET_IFNAME="eth1,eth2,eth3"))
    finding = only(findings, "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME", Status.WARN)
    assert "leaves out GPU NICs eth4" in finding.summary
    assert finding.rule == "unselected_compute_severity"
    assert "add eth4" in (finding.remedy or "")


def test_nccl_env_fails_a_tcpx_interface_that_is_down(a3: Inventory) -> None:
    netdev(a3, "eth2").operstate = "down"
    finding = only(nccl(a3, tcpx_environ()), "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME", Status.FAIL)
    assert finding.summary.endswith("cannot use: eth2 (down)")


def test_nccl_env_fails_a_control_device_that_is_down(a3: Inventory) -> None:
    netdev(a3, "eth0").operstate = "down"
    findings = nccl(a3, tcpx_environ())
    finding = only(findings, "NCCL_GPUDIRECTTCPX_CTRL_DEV", Status.FAIL)
    assert finding.summary.endswith("cannot use: eth0 (down)")
    assert [f for f in findings if f.subject == "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME"] == []


def test_nccl_env_judges_the_fastrak_settings_too(a3: Inventory) -> None:
    findings = nccl(a3, {"NCCL_FASTRAK_IFNAME": "eth1,eth2,eth3,eth4", "NCCL_FASTRAK_CTRL_DEV": "eth7"})
    finding = only(findings, "NCCL_FASTRAK_CTRL_DEV", Status.FAIL)
    assert "eth7 (no such interface)" in finding.summary
    assert [f for f in findings if f.subject == "NCCL_FASTRAK_IFNAME"] == []


def test_nccl_env_fails_nccl_net_socket_on_gpudirect_tcpx_nics(a3: Inventory) -> None:
    findings = nccl(a3, tcpx_environ(NCCL_NET="Socket"))
    finding = only(findings, "NCCL_NET", Status.FAIL)
    assert finding.summary.endswith("forces NCCL onto TCP sockets on a node with 4 GPUDirect-TCPX NICs "
                                    "(eth1, eth2, eth3, eth4)")
    assert finding.evidence == {"active_compute_ports": [], "fabric_netdevs": ["eth1", "eth2", "eth3", "eth4"]}
    assert "network plugin's name" in (finding.remedy or "")


def test_nccl_env_does_not_judge_tcpx_settings_without_gpu_nics(a3: Inventory) -> None:
    a3.pci_tree = None
    findings = nccl(a3, tcpx_environ(NCCL_GPUDIRECTTCPX_SOCKET_IFNAME="eth9"))
    assert [f for f in findings if f.subject == "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME"] == []


# -- the whole pipeline on the fixture -------------------------------------------------------

def test_a3_high_report_passes_under_its_pack() -> None:
    report = cli_report()
    assert report["rules"] == "gcp-a3-high"
    assert report["grade"] == "pass"
    assert report["exit_code"] == 0


@pytest.mark.parametrize("check_id", RDMA_CHECKS)
def test_every_rdma_check_skips_on_a3_high(check_id: str) -> None:
    found = [finding for finding in cli_report()["findings"] if finding["check"] == check_id]
    assert [(finding["subject"], finding["status"], finding["summary"]) for finding in found] == [
        ("node", "skip", "no RDMA devices on this node")]


def test_fabric_netdevs_in_the_a3_high_report() -> None:
    found = {finding["subject"]: finding["status"] for finding in cli_report()["findings"]
             if finding["check"] == "fabric-netdevs"}
    assert found == {"eth1": "pass", "eth2": "pass", "eth3": "pass", "eth4": "pass"}


# -- the probe: the TCPX plugin's version ----------------------------------------------------

def test_net_plugin_of_names_gpudirect_tcpx_when_nccl_used_it() -> None:
    text = ("host:1:1 [0] NCCL INFO NET/GPUDirectTCPX ver. 3.1.8.\n"
            "host:1:1 [0] NCCL INFO Using network GPUDirectTCPX_v7\n")
    assert net_plugin_of(parse_nccl_log(text)) == "GPUDirectTCPX 3.1.8"


def test_net_plugin_of_the_tcpx_version_line_alone() -> None:
    facts = parse_nccl_log(TCPX_README_LOG.read_text(encoding="utf-8"))
    assert facts.net_plugin_version == "GPUDirectTCPX 3.1.8"
    assert net_plugin_of(facts) == "GPUDirectTCPX 3.1.8"
