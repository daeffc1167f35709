"""AWS EFA (issue 14): the device's identity, its inventory from a p5 snapshot, pack selection
by instance type, every check on EFA nodes (hand-built with efa_node() / efa_instance(), and
the aws-p5 fixtures through the CLI), discover's EFA section, the loopback's refusal, and the
aws-ofi-nccl version carried from NCCL's log. See docs/cloud.md."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from inventory_factory import (
    dgx_h100,
    efa_hca,
    efa_instance,
    efa_node,
    gpu,
    history_of,
    only,
    pack,
    port_of,
    run_check,
)
from netdoctor.checks.needs import gate, need_counters, need_rdma
from netdoctor.cli import run_cli
from netdoctor.inventory import queries
from netdoctor.inventory.hardware import ca_type_from_part_id, efa_generation, is_efa, is_efa_function
from netdoctor.inventory.model import Dmi, Hca, Inventory, LinkLayer, LinkRate, PeerMemory, PhysState, PortState
from netdoctor.packs import load_rules
from netdoctor.parsers import sysfs_values
from netdoctor.parsers.nccl import parse_nccl_log
from netdoctor.probe.engine import net_plugin_of
from netdoctor.probe.result import ProbeNotRun, ProbeResult
from netdoctor.report.model import Finding, Status
from netdoctor.run import discover, open_source
from netdoctor.traffic import fabric_summary, loopback_rails, run_nic_loopback
from netdoctor_plugins.error_counters import error_counters
from netdoctor_plugins.gpu_nic_affinity import gpu_nic_affinity
from netdoctor_plugins.gpudirect import gpudirect
from netdoctor_plugins.link_speed import link_speed
from netdoctor_plugins.mtu import mtu
from netdoctor_plugins.nccl_env import nccl_env
from netdoctor_plugins.pfc_ecn import pfc_ecn
from netdoctor_plugins.port_state import port_state
from netdoctor_plugins.transceiver import transceiver

REPO = Path(__file__).resolve().parents[1]
NODES = REPO / "tests" / "fixtures" / "nodes"
CORPUS = REPO / "tests" / "data" / "corpus" / "nccl-log"
OFI_INIT_LOG = CORPUS / "aws-ofi-nccl-issue-889__p4d-1.14.2-libfabric-2.1-init.txt"


def snapshot(name: str) -> Inventory:
    with open_source(NODES / name) as source:
        return discover(source, deadline=time.monotonic() + 60)


@pytest.fixture(scope="module")
def p5() -> Inventory:
    return snapshot("aws-p5")


_REPORTS: dict[str, dict[str, Any]] = {}


def cli_report(name: str) -> dict[str, Any]:
    """`netdoctor check --snapshot FIXTURE --no-probe --format json`, in-process, once per fixture."""
    if name not in _REPORTS:
        stdout, stderr = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            run_cli(["check", "--snapshot", str(NODES / name), "--no-probe", "--format", "json"])
        _REPORTS[name] = json.loads(stdout.getvalue())
    return _REPORTS[name]


def findings_of(report: dict[str, Any], check_id: str) -> dict[str, dict[str, Any]]:
    found = [finding for finding in report["findings"] if finding["check"] == check_id]
    by_subject = {finding["subject"]: finding for finding in found}
    assert len(by_subject) == len(found), f"{check_id} judged a subject twice"
    return by_subject


def statuses(findings: list[Finding]) -> set[Status]:
    return {finding.status for finding in findings}


# -- identity: netdoctor.inventory.hardware, netdoctor.parsers.sysfs_values ---------------------

def test_ca_type_from_part_id_names_efa_by_its_pci_device_id_and_mellanox_by_decimal() -> None:
    assert ca_type_from_part_id(61345) == "efa1"          # 0xefa1
    assert ca_type_from_part_id(0xefa3) == "efa3"
    assert ca_type_from_part_id(4129) == "MT4129"
    assert ca_type_from_part_id(None) is None
    assert ca_type_from_part_id(0) is None


def test_efa_generation_takes_only_the_four_efa_device_ids() -> None:
    assert [efa_generation(device) for device in ("0xefa0", "0xEFA1", "efa2", " 0xefa3\n")] == [
        "efa0", "efa1", "efa2", "efa3"]
    assert efa_generation("0xefa4") is None
    assert efa_generation("0xec20") is None               # ENA, same vendor
    assert efa_generation(None) is None


def test_is_efa_function_needs_amazons_vendor_and_an_efa_device() -> None:
    assert is_efa_function("0x1d0f", "0xefa1")
    assert is_efa_function("0x1D0F\n", "0xefa0")
    assert not is_efa_function("0x1d0f", "0xec20")        # ENA
    assert not is_efa_function("0x15b3", "0xefa1")        # not Amazon's
    assert not is_efa_function(None, "0xefa1")


def test_is_efa_by_driver_by_pci_ids_or_by_ca_type() -> None:
    assert is_efa(Hca("rdmap79s0", driver="efa"))
    assert is_efa(Hca("efa_0", pci_vendor="0x1d0f", pci_device="0xefa2"))
    assert is_efa(Hca("efa_0", ca_type="efa1"))
    assert not is_efa(Hca("mlx5_0", ca_type="MT4129", driver="mlx5_core", pci_vendor="0x15b3", pci_device="0x1021"))
    assert not is_efa(Hca("ena0", pci_vendor="0x1d0f", pci_device="0xec20"))


def test_pci_id_is_lower_case_0x_and_four_hex_digits_or_none() -> None:
    assert sysfs_values.pci_id("0x1D0F\n") == "0x1d0f"
    assert sysfs_values.pci_id("0xefa1") == "0xefa1"
    assert sysfs_values.pci_id(None) is None
    assert sysfs_values.pci_id("") is None
    assert sysfs_values.pci_id("0x1d0") is None
    assert sysfs_values.pci_id("1d0f") is None


def test_p2p_providers_reads_efas_p2p_file() -> None:
    assert sysfs_values.p2p_providers("NVIDIA\n") == ("NVIDIA",)
    assert sysfs_values.p2p_providers("NVIDIA peermem\n") == ("NVIDIA peermem",)
    assert sysfs_values.p2p_providers("\n") == ()
    assert sysfs_values.p2p_providers("NVIDIA,NEURON\n") == ("NVIDIA", "NEURON")


# -- the inventory of the aws-p5 snapshot ----------------------------------------------------

def test_p5_snapshot_has_32_efa_devices_with_their_pci_identity(p5: Inventory) -> None:
    assert len(p5.hcas) == 32
    assert {(hca.driver, hca.pci_vendor, hca.pci_device, hca.ca_type) for hca in p5.hcas} == {
        ("efa", "0x1d0f", "0xefa1", "efa1")}
    assert {hca.p2p_providers for hca in p5.hcas} == {("NVIDIA",)}
    assert all(is_efa(hca) for hca in p5.hcas)
    assert p5.hca("rdmap79s0").pci_address == "0000:4f:00.0"


def test_p5_efa_ports_have_no_link_layer_and_the_default_rate(p5: Inventory) -> None:
    ports = [port for hca in p5.hcas for port in hca.ports.values()]
    assert len(ports) == 32
    assert {port.link_layer for port in ports} == {LinkLayer.UNSPECIFIED}
    assert {(port.rate.gbps, port.rate.width, port.rate.speed) for port in ports if port.rate} == {(100, 4, "EDR")}
    assert all(port.rate is not None for port in ports)


def test_p5_hw_counters_hold_port_and_device_statistics(p5: Inventory) -> None:
    counters = port_of(p5, "rdmap79s0:1").hw_counters
    # Port statistics (ports/1/hw_counters) ...
    assert {"retrans_pkts", "retrans_timeout_events", "rx_drops", "rdma_read_wr_err"} <= set(counters)
    assert counters["retrans_pkts"] == 1204
    # ... and the device's (hw_counters/ of the device) where the port lacks them.
    assert {"cmds_err", "no_completion_cmds", "submitted_cmds", "completed_cmds"} <= set(counters)
    assert counters["submitted_cmds"] == counters["completed_cmds"] == 1742
    assert port_of(p5, "rdmap79s0:1").counters == {}        # no IBTA counters on EFA


def test_p5_versions_of_the_efa_stack(p5: Inventory) -> None:
    assert p5.efa_driver_version == "2.17.1g"
    assert p5.libfabric_version == "1.22.0amzn4.0"
    found = queries.versions(p5)
    assert found["efa"] == "2.17.1g"
    assert found["libfabric"] == "1.22.0amzn4.0"
    assert "nccl_net_plugin" not in found


def test_p5_libfabric_opens_an_rdm_domain_per_device(p5: Inventory) -> None:
    assert p5.libfabric_providers is not None
    rdm = {entry.domain for entry in p5.libfabric_providers if entry.provider == "efa" and entry.ep_type == "FI_EP_RDM"}
    assert rdm == {f"{hca.name}-rdm" for hca in p5.hcas}


def test_p5_pcie_levels_from_the_tree(p5: Inventory) -> None:
    gpu0 = p5.gpus[0].pci_address
    assert gpu0 == "0000:53:00.0"
    assert queries.pcie_level(p5, gpu0, "0000:4f:00.0") == "PIX"                    # its own switch
    assert queries.pcie_level(p5, gpu0, p5.hca("rdmap96s0").pci_address) == "NODE"   # GPU1's, same socket
    assert queries.pcie_level(p5, gpu0, p5.hca("rdmap147s0").pci_address) == "SYS"   # GPU4's, other socket
    assert queries.pcie_level(p5, gpu0, "0000:ff:00.0") is None                      # not in the tree


def test_p5_nearest_gpu_of_an_efa_device_comes_from_the_pcie_tree(p5: Inventory) -> None:
    nearest, basis = queries.nearest_gpu(p5, p5.hca("rdmap79s0"))
    assert nearest is not None and nearest.index == 0
    assert basis == "PIX in the PCIe tree"
    nearest, basis = queries.nearest_gpu(p5, p5.hca("rdmap201s0"))
    assert nearest is not None and nearest.index == 7 and "PCIe tree" in basis


def test_p5_has_no_unbound_efa_function(p5: Inventory) -> None:
    assert p5.pci_efa is not None and len(p5.pci_efa) == 32
    assert queries.unbound_efa_functions(p5) == {}


def test_unbound_efa_functions_of_the_unbound_fixture() -> None:
    assert queries.unbound_efa_functions(snapshot("aws-p5-efa-unbound")) == {
        "0000:72:00.0": "efa1", "0000:73:00.0": "efa1", "0000:74:00.0": "efa1"}


# -- pack selection by instance type ---------------------------------------------------------

def selected(inventory: Inventory) -> str:
    return load_rules(None, inventory, env={}).name


def test_p5_fixture_selects_aws_p5(p5: Inventory) -> None:
    assert selected(p5) == "aws-p5"


def test_p5_factory_node_selects_aws_p5() -> None:
    assert selected(efa_node()) == "aws-p5"


def test_h200_with_16_efa_of_200g_selects_aws_p5en() -> None:
    assert selected(efa_instance(gpu_name="NVIDIA H200", per_gpu=2, rate_gbps=200)) == "aws-p5en"


def test_a100_with_4_efa_selects_aws_p4d() -> None:
    assert selected(efa_instance(gpu_name="NVIDIA A100-SXM4-40GB", gpus_with_efa=(0, 2, 4, 6), per_gpu=1)) == "aws-p4d"


def test_dgx_h100_still_selects_dgx_h100() -> None:
    inventory = dgx_h100()
    inventory.dmi = Dmi("NVIDIA", "DGXH100")     # the dgx-h100 pack is for 8-GPU platforms (DMI or NVSwitches)
    assert selected(inventory) == "dgx-h100"


def test_p5_that_lost_three_devices_still_selects_aws_p5() -> None:
    inventory = efa_node()
    del inventory.hcas[8:11]
    assert selected(inventory) == "aws-p5"


# -- port-state ------------------------------------------------------------------------------

def test_port_state_passes_active_efa_and_says_active_proves_little() -> None:
    findings = run_check(port_state, "port-state", efa_node(), pack_name="aws-p5")
    assert statuses(findings) == {Status.PASS}
    assert len(findings) == 32                  # no SM or P_Key finding: EFA has neither
    finding = only(findings, "rdmap79s0:1")
    assert finding.summary.startswith("ACTIVE/LinkUp, 100 Gb/s (4X EDR)")
    assert "EFA reports ACTIVE whenever its driver runs" in finding.summary


def test_port_state_fails_an_efa_port_that_is_down_with_the_efa_remedy() -> None:
    inventory = efa_node()
    port = port_of(inventory, "rdmap131s0:1")
    port.state, port.phys_state = PortState.DOWN, PhysState.DISABLED
    findings = run_check(port_state, "port-state", inventory, pack_name="aws-p5")
    finding = only(findings, "rdmap131s0:1")
    assert finding.status is Status.FAIL
    assert finding.summary == ("DOWN/Disabled: the EFA device is not ACTIVE, which its driver reports for every "
                               "working device")
    assert "fi_info -p efa" in (finding.remedy or "") and "stop and start the instance" in (finding.remedy or "")
    assert finding.rule == "not_active"


def test_port_state_fails_a_down_efa_port_even_where_down_compute_ports_are_allowed() -> None:
    inventory = efa_node()
    port = port_of(inventory, "rdmap80s0:1")
    port.state, port.phys_state = PortState.DOWN, PhysState.DISABLED
    finding = only(run_check(port_state, "port-state", inventory, pack_name="default"), "rdmap80s0:1")
    assert finding.status is Status.FAIL
    assert "EFA device is not ACTIVE" in finding.summary


def test_port_state_fails_an_efa_function_without_an_rdma_device_by_its_address() -> None:
    inventory = efa_node()
    inventory.pci_efa = {hca.pci_address: "0xefa1" for hca in inventory.hcas if hca.pci_address}
    inventory.pci_efa["0000:99:00.0"] = "0xefa1"
    findings = run_check(port_state, "port-state", inventory, pack_name="aws-p5")
    finding = only(findings, "0000:99:00.0")
    assert finding.status is Status.FAIL
    assert finding.summary.startswith("EFA device 0000:99:00.0 (efa1) is on the PCI bus but has no RDMA device")
    assert finding.evidence == {"pci_address": "0000:99:00.0", "efa": "efa1"}
    assert "lspci -k -s 0000:99:00.0" in (finding.remedy or "")
    assert [f.subject for f in findings if f.status is not Status.PASS] == ["0000:99:00.0"]


# -- link-speed ------------------------------------------------------------------------------

def test_link_speed_passes_efa_at_the_p5_rate() -> None:
    findings = run_check(link_speed, "link-speed", efa_node(), pack_name="aws-p5")
    assert statuses(findings) == {Status.PASS}
    assert len(findings) == 32


def test_link_speed_warns_on_the_efa_drivers_default_rate_below_the_pack() -> None:
    findings = run_check(link_speed, "link-speed", efa_node(), pack_name="aws-p5en")
    finding = only(findings, "rdmap79s0:1")
    assert finding.status is Status.WARN
    assert finding.rule == "efa_default_rate"
    assert finding.summary.startswith("EFA reports 100 Gb/s (4X EDR), the efa driver's default")
    assert "200 Gb/s" in finding.summary
    assert finding.evidence["efa_default_rate"] is True
    assert statuses(findings) == {Status.WARN}


def test_link_speed_fails_an_efa_rate_below_the_pack_that_is_not_the_default() -> None:
    inventory = efa_node()
    port_of(inventory, "rdmap79s0:1").rate = LinkRate(100, 2, "HDR")
    findings = run_check(link_speed, "link-speed", inventory, pack_name="aws-p5en")
    finding = only(findings, "rdmap79s0:1")
    assert finding.status is Status.FAIL
    assert finding.rule == "degraded"
    assert finding.summary.startswith("EFA device reports 100 Gb/s (2X HDR), expected")
    assert "another EFA generation" in (finding.remedy or "")
    assert "efa_default_rate" not in finding.evidence


def test_link_speed_default_rate_severity_comes_from_the_pack() -> None:
    findings = run_check(link_speed, "link-speed", efa_node(), pack_name="aws-p5en",
                         overrides={"efa_default_rate_severity": "fail"})
    assert only(findings, "rdmap79s0:1").status is Status.FAIL


# -- error-counters --------------------------------------------------------------------------

def test_needs_gate_lets_error_counters_run_on_efa_hw_counters() -> None:
    assert need_counters(efa_node(), None) is None


def test_error_counters_first_run_passes_and_waits_for_growth() -> None:
    findings = run_check(error_counters, "error-counters", efa_node(), pack_name="aws-p5")
    assert statuses(findings) == {Status.PASS}
    finding = only(findings, "rdmap79s0:1")
    assert finding.summary.startswith("9 EFA counters read (there is no earlier reading)")
    assert finding.summary.endswith("judged by growth from the next run")
    assert finding.evidence["retrans_timeout_events"] == 0


def test_error_counters_fails_retrans_timeouts_growing_within_an_hour() -> None:
    inventory = efa_node()
    port_of(inventory, "rdmap79s0:1").hw_counters["retrans_timeout_events"] = 500
    history = history_of(inventory, changes={"rdmap79s0:1": {"hw_counters/retrans_timeout_events": 0}})
    findings = run_check(error_counters, "error-counters", inventory, pack_name="aws-p5", history=history)
    finding = only(findings, "rdmap79s0:1")
    assert finding.status is Status.FAIL
    assert finding.summary.startswith("retrans_timeout_events rose by 500 in 1.0 h (500/h; limit 10/h)")
    assert finding.evidence["delta"] == 500 and finding.evidence["counter"] == "retrans_timeout_events"
    assert finding.rule == "retrans_timeout_events"
    assert "stop and start the instance" in (finding.remedy or "")
    # The other ports did not grow: they pass with the growth judged.
    other = only(findings, "rdmap80s0:1")
    assert other.status is Status.PASS and other.summary.startswith("no error growth beyond limits in 1.0 h (9 counters)")


def test_error_counters_ignores_retrans_timeouts_within_the_limit() -> None:
    inventory = efa_node()
    port_of(inventory, "rdmap79s0:1").hw_counters["retrans_timeout_events"] = 5
    history = history_of(inventory, changes={"rdmap79s0:1": {"hw_counters/retrans_timeout_events": 0}})
    findings = run_check(error_counters, "error-counters", inventory, pack_name="aws-p5", history=history)
    assert only(findings, "rdmap79s0:1").status is Status.PASS


def test_error_counters_unknown_for_an_efa_port_without_hw_counters() -> None:
    inventory = efa_node()
    port_of(inventory, "rdmap79s0:1").hw_counters = {}
    findings = run_check(error_counters, "error-counters", inventory, pack_name="aws-p5")
    finding = only(findings, "rdmap79s0:1")
    assert finding.status is Status.UNKNOWN
    assert finding.summary.startswith("no EFA hw_counters to judge")
    assert "r1.14" in (finding.remedy or "")
    assert only(findings, "rdmap80s0:1").status is Status.PASS


# -- gpudirect -------------------------------------------------------------------------------

def efa_gpudirect(inventory: Inventory, pack_name: str = "aws-p5") -> list[Finding]:
    return run_check(gpudirect, "gpudirect", inventory, pack_name=pack_name)


def test_gpudirect_passes_efa_with_the_nvidia_p2p_provider() -> None:
    findings = efa_gpudirect(efa_node())
    assert len(findings) == 1
    finding = only(findings, "node", Status.PASS)
    assert finding.summary == ("EFA GPUDirect RDMA: 32 devices reach GPU memory through its driver's NVIDIA P2P "
                               "provider, and libfabric's efa provider opens each of them")
    assert finding.evidence["efa_p2p"]["rdmap79s0"] == ["NVIDIA"]
    assert len(finding.evidence["libfabric_rdm_domains"]) == 32


def test_gpudirect_ignores_nvidia_peermem_on_efa() -> None:
    inventory = efa_node()
    inventory.peer_memory = PeerMemory(nvidia_peermem=False, nv_peer_mem=False, gdrdrv=False)
    assert only(efa_gpudirect(inventory), "node").status is Status.PASS


def test_gpudirect_fails_efa_without_p2p_provider_and_without_dmabuf() -> None:
    inventory = efa_node()
    inventory.gpus = [gpu(index, dmabuf=False) for index in range(8)]
    for hca in inventory.hcas:
        hca.p2p_providers = ()
    finding = only(efa_gpudirect(inventory), "node", Status.FAIL)
    assert finding.summary.startswith("EFA has no path into GPU memory on rdmap79s0, rdmap80s0")
    assert "(+26 more)" in finding.summary
    assert "install the efa driver" in (finding.remedy or "")


def test_gpudirect_accepts_dmabuf_on_every_gpu_instead_of_a_p2p_provider() -> None:
    inventory = efa_node()
    inventory.gpus = [gpu(index, dmabuf=True) for index in range(8)]
    for hca in inventory.hcas:
        hca.p2p_providers = ()
    finding = only(efa_gpudirect(inventory), "node")
    assert finding.status is Status.PASS
    assert "through DMA-BUF" in finding.summary


def test_gpudirect_unknown_when_the_p2p_file_was_not_read() -> None:
    inventory = efa_node()
    for hca in inventory.hcas:
        hca.p2p_providers = None
    finding = only(efa_gpudirect(inventory), "node")
    assert finding.status is Status.UNKNOWN
    assert finding.summary.startswith("EFA's GPU memory path is unknown on rdmap79s0")


def test_gpudirect_fails_a_device_libfabric_does_not_open_and_names_it() -> None:
    inventory = efa_node()
    assert inventory.libfabric_providers is not None
    inventory.libfabric_providers = tuple(entry for entry in inventory.libfabric_providers
                                          if entry.domain != "rdmap131s0-rdm")
    finding = only(efa_gpudirect(inventory), "node", Status.FAIL)
    assert finding.summary.startswith("libfabric (`fi_info -p efa`) has no efa RDM endpoint for rdmap131s0:")
    assert "rdmap131s0" not in finding.evidence["libfabric_rdm_domains"]


def test_gpudirect_fails_when_libfabric_has_no_efa_provider_at_all() -> None:
    inventory = efa_node()
    inventory.libfabric_providers = ()
    finding = only(efa_gpudirect(inventory), "node", Status.FAIL)
    assert "has no efa provider at all" in finding.summary


def test_gpudirect_unknown_when_fi_info_gave_nothing() -> None:
    inventory = efa_node()
    inventory.libfabric_providers = None
    finding = only(efa_gpudirect(inventory), "node")
    assert finding.status is Status.UNKNOWN
    assert finding.summary.startswith("whether libfabric can open the EFA devices is unknown")


def test_gpudirect_fails_device_rdma_off_on_a_p5() -> None:
    finding = only(efa_gpudirect(efa_node(FI_EFA_USE_DEVICE_RDMA="0")), "node", Status.FAIL)
    assert finding.summary.startswith("FI_EFA_USE_DEVICE_RDMA=0 (environment) turns off EFA's RDMA read")
    assert finding.rule == "efa_device_rdma"
    assert finding.evidence["FI_EFA_USE_DEVICE_RDMA"] == "0"


def test_gpudirect_device_rdma_off_passes_under_the_default_pack() -> None:
    assert pack("default").data["gpudirect"]["efa_device_rdma"] is False
    findings = efa_gpudirect(efa_node(FI_EFA_USE_DEVICE_RDMA="0"), pack_name="default")
    finding = only(findings, "node")
    assert finding.status is Status.PASS
    assert finding.evidence["FI_EFA_USE_DEVICE_RDMA"] == "0"


def test_gpudirect_device_rdma_on_passes_on_a_p5() -> None:
    assert only(efa_gpudirect(efa_node(FI_EFA_USE_DEVICE_RDMA="1")), "node").status is Status.PASS


# -- the checks EFA does not apply to --------------------------------------------------------

def test_mtu_skips_every_efa_port() -> None:
    findings = run_check(mtu, "mtu", efa_node(), pack_name="aws-p5")
    assert len(findings) == 32
    assert statuses(findings) == {Status.SKIP}
    assert only(findings, "rdmap79s0:1").summary.startswith("EFA: no IB or RoCE MTU to set")


def test_pfc_ecn_gate_skips_an_efa_node() -> None:
    assert gate(pfc_ecn.__netdoctor_check__, efa_node()) == (Status.SKIP, "no RoCE ports", "roce")


def test_error_counters_gate_lets_an_efa_node_through() -> None:
    assert gate(error_counters.__netdoctor_check__, efa_node()) is None


def test_transceiver_skips_every_efa_port() -> None:
    findings = run_check(transceiver, "transceiver", efa_node(), pack_name="aws-p5")
    assert len(findings) == 32
    assert statuses(findings) == {Status.SKIP}
    assert only(findings, "rdmap82s0:1").summary == "EFA: no port module at the instance (the cable is AWS's)"


# -- nccl-env --------------------------------------------------------------------------------

def nccl_findings(**environ: str) -> list[Finding]:
    return run_check(nccl_env, "nccl-env", efa_node(**environ), pack_name="aws-p5")


def test_nccl_env_fails_fi_provider_that_keeps_libfabric_off_efa() -> None:
    finding = only(nccl_findings(FI_PROVIDER="tcp"), "FI_PROVIDER", Status.FAIL)
    assert "keeps libfabric off EFA" in finding.summary
    assert finding.rule == "fi_provider_severity"
    assert "FI_PROVIDER=efa" in (finding.remedy or "")


def test_nccl_env_accepts_fi_provider_efa() -> None:
    findings = nccl_findings(FI_PROVIDER="efa")
    assert [finding.subject for finding in findings if finding.subject == "FI_PROVIDER"] == []
    assert statuses(findings) == {Status.PASS}


def test_nccl_env_accepts_fi_provider_lists_that_include_efa() -> None:
    assert [f for f in nccl_findings(FI_PROVIDER="shm, efa") if f.subject == "FI_PROVIDER"] == []


def test_nccl_env_fails_fi_provider_that_excludes_efa() -> None:
    assert only(nccl_findings(FI_PROVIDER="^efa"), "FI_PROVIDER").status is Status.FAIL


def test_nccl_env_accepts_fi_provider_that_only_excludes_others() -> None:
    assert [f for f in nccl_findings(FI_PROVIDER="^tcp,shm") if f.subject == "FI_PROVIDER"] == []


def test_nccl_env_accepts_nccl_net_naming_the_ofi_plugin() -> None:
    for name in ("Libfabric", "AWS Libfabric"):
        assert statuses(nccl_findings(NCCL_NET=name)) == {Status.PASS}


def test_nccl_env_fails_nccl_net_socket_on_efa() -> None:
    finding = only(nccl_findings(NCCL_NET="Socket"), "NCCL_NET", Status.FAIL)
    assert "forces NCCL onto TCP sockets on a node with 32 active compute RDMA port(s)" in finding.summary
    assert "network plugin's name" in (finding.remedy or "")


def test_nccl_env_fails_nccl_net_ib_on_efa() -> None:
    finding = only(nccl_findings(NCCL_NET="IB"), "NCCL_NET", Status.FAIL)
    assert "InfiniBand transport, which cannot open EFA devices" in finding.summary
    assert finding.rule == "net_socket_severity"


def test_nccl_env_does_not_judge_nccl_ib_disable_on_an_efa_only_node() -> None:
    findings = nccl_findings(NCCL_IB_DISABLE="1")
    assert [f for f in findings if f.subject == "NCCL_IB_DISABLE"] == []
    assert Status.FAIL not in statuses(findings)


def test_nccl_env_does_not_judge_nccl_ib_hca_on_an_efa_only_node() -> None:
    findings = nccl_findings(NCCL_IB_HCA="mlx5_0")
    assert [f for f in findings if f.subject == "NCCL_IB_HCA"] == []
    assert not any("mlx5_0" in finding.summary for finding in findings)
    assert statuses(findings) == {Status.PASS}


# -- gpu-nic-affinity ------------------------------------------------------------------------

def test_gpu_nic_affinity_reads_efa_placement_from_the_pcie_tree(p5: Inventory) -> None:
    findings = run_check(gpu_nic_affinity, "gpu-nic-affinity", p5, pack_name="aws-p5")
    assert statuses(findings) == {Status.PASS}
    finding = only(findings, "GPU4")
    levels = finding.evidence["levels"]
    assert [name for name, level in levels.items() if level == "PIX"] == [
        "rdmap147s0", "rdmap148s0", "rdmap149s0", "rdmap150s0"]
    assert levels["rdmap164s0"] == "NODE"       # GPU5's switch, same socket
    assert levels["rdmap79s0"] == "SYS"         # GPU0's, across the socket
    assert sorted(Counter(levels.values()).items()) == [("NODE", 12), ("PIX", 4), ("SYS", 16)]
    assert finding.evidence["near_nics"] == ["rdmap147s0", "rdmap148s0", "rdmap149s0", "rdmap150s0"]


def test_gpu_nic_affinity_without_the_tree_falls_back_to_numa_and_says_so(p5: Inventory) -> None:
    inventory = copy.deepcopy(p5)
    inventory.pci_tree = None
    findings = run_check(gpu_nic_affinity, "gpu-nic-affinity", inventory, pack_name="aws-p5")
    node = only(findings, "node", Status.UNKNOWN)
    assert node.summary.startswith("PCIe distances unknown")
    gpu0 = only(findings, "GPU0")
    assert gpu0.status is Status.PASS
    assert gpu0.summary.startswith("NUMA node 0 shared with rdmap79s0")
    assert "PCIe distance unknown" in gpu0.summary
    assert Status.FAIL not in statuses(findings)      # too few near NICs is not claimed without the tree


def test_gpu_nic_affinity_passes_every_gpu_of_the_p5_fixture() -> None:
    affinity = findings_of(cli_report("aws-p5"), "gpu-nic-affinity")
    assert sorted(affinity) == [f"GPU{index}" for index in range(8)]
    assert {finding["status"] for finding in affinity.values()} == {"pass"}
    assert affinity["GPU0"]["summary"] == ("nearest compute NIC rdmap79s0, rdmap80s0, rdmap81s0, rdmap82s0 (PIX), "
                                           "NUMA node 0")


def test_gpu_nic_affinity_fails_the_gpu_that_lost_unbound_efa_functions() -> None:
    report = cli_report("aws-p5-efa-unbound")
    affinity = findings_of(report, "gpu-nic-affinity")
    finding = affinity["GPU2"]
    assert finding["status"] == "fail"
    assert finding["summary"].startswith("GPU2 has 1 of 4 working compute NICs at PXB or closer (rdmap113s0)")
    assert "0000:72:00.0" in finding["summary"]
    assert finding["evidence"]["lost_functions"] == ["0000:72:00.0", "0000:73:00.0", "0000:74:00.0"]
    assert [subject for subject, item in affinity.items() if item["status"] != "pass"] == ["GPU2"]
    port_failures = {subject for subject, item in findings_of(report, "port-state").items() if item["status"] == "fail"}
    assert port_failures == {"0000:72:00.0", "0000:73:00.0", "0000:74:00.0"}


def test_gpu_nic_affinity_fails_the_gpu_whose_efa_device_is_down() -> None:
    report = cli_report("aws-p5-efa-down")
    affinity = findings_of(report, "gpu-nic-affinity")
    finding = affinity["GPU3"]
    assert finding["status"] == "fail"
    assert "rdmap131s0" in finding["summary"]
    assert finding["summary"].endswith("lost: rdmap131s0 not ACTIVE")
    assert finding["evidence"]["not_active"] == ["rdmap131s0"]
    assert [subject for subject, item in affinity.items() if item["status"] != "pass"] == ["GPU3"]
    assert findings_of(report, "port-state")["rdmap131s0:1"]["status"] == "fail"


def test_p5_fixture_report_passes_under_the_aws_p5_pack() -> None:
    report = cli_report("aws-p5")
    assert report["rules"] == "aws-p5"
    assert report["grade"] == "pass"
    assert report["versions"]["efa"] == "2.17.1g"
    assert report["versions"]["libfabric"] == "1.22.0amzn4.0"


# -- the NIC loopback ------------------------------------------------------------------------

def test_loopback_rails_leave_out_efa_ports() -> None:
    assert loopback_rails(efa_node(), pack("aws-p5")) == ()


def test_loopback_rails_keep_infiniband_rails_beside_efa() -> None:
    inventory = dgx_h100(storage=None)
    inventory.hcas.append(efa_hca(0, 0))
    # Under the default pack the EFA port is a compute rail with GPU0 nearest (the report's fabric has it) ...
    assert {"port": "rdmap79s0:1", "rate_gbps": 100, "gpu": 0} in fabric_summary(inventory, pack("default"))["rails"]
    # ... but the loopback cannot drive it alone.
    rails = loopback_rails(inventory, pack("default"))
    assert [rail.port for rail in rails] == [f"mlx5_{index}:1" for index in range(8)]


def test_nic_loopback_is_not_run_on_an_efa_only_node() -> None:
    result = run_nic_loopback(efa_node(), pack("aws-p5"), time.monotonic() + 5, env={}, tool_path=None, debug=False)
    assert isinstance(result, ProbeNotRun)
    assert result.unknown is False
    assert "aws-ofi-nccl" in result.reason
    assert "fleet probe" in result.reason


# -- discover --------------------------------------------------------------------------------

def test_discover_text_lists_the_efa_devices_per_gpu() -> None:
    done = subprocess.run([sys.executable, "-m", "netdoctor", "discover", "--snapshot", str(NODES / "aws-p5")],
                          capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1"})
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "AWS EFA (32 devices" in text
    assert "GPU0: rdmap79s0 rdmap80s0 rdmap81s0 rdmap82s0" in text
    assert "GPU7: rdmap198s0 rdmap199s0 rdmap200s0 rdmap201s0" in text
    assert "GPUDirect (efa p2p): NVIDIA; efa driver 2.17.1g" in text
    assert "libfabric 1.22.0amzn4.0: efa provider opens 32 devices (RDM)" in text
    rows = [line.split() for line in text.splitlines() if line.strip().startswith("rdmap79s0 ")]
    assert rows and "EFA" in rows[0]


# -- the probe: aws-ofi-nccl's version -------------------------------------------------------

def test_net_plugin_of_names_aws_ofi_nccl_when_nccl_used_libfabric() -> None:
    text = ("host:1:1 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.14.2\n"
            "host:1:1 [0] NCCL INFO Using network Libfabric\n")
    assert net_plugin_of(parse_nccl_log(text)) == "aws-ofi-nccl 1.14.2"


def test_net_plugin_of_the_aws_ofi_nccl_init_log() -> None:
    facts = parse_nccl_log(OFI_INIT_LOG.read_text(encoding="utf-8"))
    assert facts.net_plugin_version == "aws-ofi-nccl 1.14.2"
    assert net_plugin_of(facts) == "aws-ofi-nccl 1.14.2"


def test_net_plugin_of_without_a_plugin_version_is_none() -> None:
    assert net_plugin_of(None) is None
    assert net_plugin_of(parse_nccl_log("host:1:1 [0] NCCL INFO Using network IB\n")) is None


def test_probe_result_json_round_trips_net_plugin() -> None:
    result = ProbeResult(status="ok", net_plugin="aws-ofi-nccl 1.14.2")
    data = result.to_json()
    assert data["net_plugin"] == "aws-ofi-nccl 1.14.2"
    assert ProbeResult.from_json(json.loads(json.dumps(data))).net_plugin == "aws-ofi-nccl 1.14.2"
    assert ProbeResult.from_json({"status": "ok", "net_plugin": 7}).net_plugin is None


def test_versions_carry_the_net_plugin() -> None:
    found = queries.versions(efa_node(), net_plugin="aws-ofi-nccl 1.14.2")
    assert found["nccl_net_plugin"] == "aws-ofi-nccl 1.14.2"
    assert "nccl_net_plugin" not in queries.versions(efa_node())


# -- review mends ----------------------------------------------------------------------------

def test_efa_reports_no_hca_firmware_version(p5: Inventory) -> None:
    """EFA's fw_ver is 0.0.0.0 on every node: no firmware drift to compare, the efa driver's is."""
    found = queries.versions(p5)
    assert "hca_firmware" not in found and found["efa"] == "2.17.1g"


def test_an_old_rdma_core_calling_efa_infiniband_is_no_conflict() -> None:
    from netdoctor.inventory.from_tools import join_ibv_devinfo
    from netdoctor.inventory.merge import Draft
    from netdoctor.parsers.ibv_devinfo import parse_ibv_devinfo

    text = (Path(__file__).parent / "data" / "corpus" / "ibv_devinfo").glob("*rdma-core*")
    devices = parse_ibv_devinfo(next(iter(text)).read_text())
    assert devices[0].ports[0].link_layer is LinkLayer.INFINIBAND and devices[0].vendor_id == 0x1d0f

    class NoSource:
        is_snapshot = True
        sys = None
        host, captured_at, boot_id = "p4d", "2026-11-21T22:40:00Z", None

    draft = Draft(NoSource())  # type: ignore[arg-type]
    hca = draft.hca(devices[0].hca_id, "sysfs")
    draft.port(hca, 1, "sysfs").link_layer = LinkLayer.UNSPECIFIED
    join_ibv_devinfo(draft, devices, {})
    assert draft.inventory.conflicts == [] and hca.pci_device == "0xefa0" and hca.ca_type == "efa0"


@pytest.mark.parametrize(("value", "selects"), [("efa", True), ("efa;ofi_rxm", True), ("tcp,efa", True),
                                                ("^efa", False), ("^tcp", True), ("tcp;ofi_rxm", False)])
def test_fi_provider_filters_as_libfabric_reads_them(value: str, selects: bool) -> None:
    fails = [finding for finding in nccl_findings(FI_PROVIDER=value) if finding.subject == "FI_PROVIDER"]
    assert bool(fails) is not selects


def test_an_efa_node_whose_driver_bound_nothing_still_fails_port_state() -> None:
    """No efa driver at all: no RDMA device, 32 EFA functions on the bus. The node must not pass
    as "no RDMA devices on this node"."""
    inventory = efa_node()
    inventory.pci_efa = {hca.pci_address: "0xefa1" for hca in inventory.hcas if hca.pci_address}
    inventory.hcas = []
    assert need_rdma(inventory, None) is None
    findings = run_check(port_state, "port-state", inventory)
    assert len(findings) == 32 and {finding.status for finding in findings} == {Status.FAIL}
    assert findings[0].subject == "0000:4f:00.0" and "no RDMA device" in findings[0].summary


def test_a_socket_fallback_log_reads_as_net_socket_in_fleet_probe_facts() -> None:
    """aws-ofi-nccl 1.17.1 failed to initialise on a p4d and NCCL chose `Socket`; that log has no
    channel line, so the transport comes from `Using network` (what fleet probe records per pair)."""
    from netdoctor.fleet.probe_traffic import _facts

    log = (Path(__file__).parent / "data" / "corpus" / "nccl-log"
           / "gnosia93-training-on-eks__a2-ec2-nvlink_p4d-aws-ofi-nccl-1.17.1-socket-fallback.log").read_text()
    assert parse_nccl_log(log).network_used() == "NET/Socket"
    assert _facts(log)["transport"] == "NET/Socket"
