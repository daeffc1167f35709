"""nvswitch-fabric on NVLink domains (CONTRACT 8): GB200 NVL72 trays (in their domain or not, fabric
health), IMEX (unit, `nvidia-imex-ctl -N` UP/DOWN/DEGRADED, peers not READY, not run), HGX B200
boards (fabric manager though no NVSwitch is on the bus; a zero clique is normal), H100 unchanged.

The tray is shaped from the real `nvidia-smi -q -x` of a 4x GB200 tray (tests/data/corpus/
nvidia-smi-q-x/NVIDIA-k8s-test-infra__qx-gb200.xml: PCI ids, clique 2, cluster UUID, slot 14,
tray 4, host 1, modules 2,1,4,3) and the B200 board from its B200 sibling (empty chassis serial,
host 1, Switch Connected, zero clique/UUID, health Healthy); IMEX answers are the real AWS
18-tray capture and derivations of it (test_parsers_imex.py).
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime, timezone

from netdoctor.inventory.model import (
    Gpu,
    GpuFabric,
    GpuPlatform,
    Inventory,
    Netdev,
    ServiceState,
    SourceState,
    SourceStatus,
)
from netdoctor.inventory.render import inventory_to_json, render_inventory_text
from netdoctor.parsers.nvidia_imex_ctl import parse_nvidia_imex_ctl
from netdoctor.report.model import Finding, Status
from netdoctor_plugins.nvswitch_domain import nvl72_tray, nvlink5_board
from netdoctor_plugins.nvswitch_fabric import nvswitch_fabric
from inventory_factory import dgx_h100, gpu, run_check
from test_parsers_imex import AWS_18, down_with_node_3_unavailable

CHECK = "nvswitch-fabric"
CLUSTER = "00000001-0000-0000-0000-000000000001"
ZERO = "00000000-0000-0000-0000-000000000000"
TRAY_ADDRESSES = ("0000:29:00.0", "0000:3f:00.0", "0000:9c:00.0", "0000:b2:00.0")
MODULES = (2, 1, 4, 3)
SINCE = datetime(2026, 11, 21, 20, 0, tzinfo=timezone.utc)
IMEX_UP = ServiceState("nvidia-imex", "active", "running", "success", 0, SINCE)
IMEX_DEAD = ServiceState("nvidia-imex", "inactive", "dead", "success", 0, None)           # not installed, or disabled
IMEX_ENABLED_DEAD = ServiceState("nvidia-imex", "inactive", "dead", "success", 0, None, "enabled")
FM_UP = ServiceState("nvidia-fabricmanager", "active", "running", "success", 0, SINCE)
IN_DOMAIN = GpuFabric("completed", "success", 2, CLUSTER, health_summary="healthy", bandwidth="full")
HERE = "172.31.49.228"        # node #3 of the real 18-node IMEX answer


def tray(*, fabric: GpuFabric | None = IN_DOMAIN, imex: str | None = None, services: dict[str, ServiceState] | None = None,
         name: str = "NVIDIA GB200", platform: bool = True, recovery: str | None = "none") -> Inventory:
    gpus = [Gpu(index, name=name, pci_address=address, fabric=fabric, nvlink_version=7, recovery_action=recovery,
                platform=GpuPlatform("1820000000001", 14, 4, 1, "switch_connected", module) if platform else None,
                sources=("nvml",))
            for index, (address, module) in enumerate(zip(TRAY_ADDRESSES, MODULES, strict=True))]
    inventory = Inventory(host="tray04", captured_at="2026-11-26T12:00:00Z", gpus=gpus, nvswitches=(),
                          netdevs=[Netdev("enP6p3s0f0np0", addresses=(f"{HERE}/20", "fe80::1/64"))],
                          services={"nvidia-imex": IMEX_UP} if services is None else services,
                          virtualization="none")
    inventory.sources["nvml"] = SourceStatus("nvml", SourceState.OK)
    if imex is not None:
        inventory.imex = parse_nvidia_imex_ctl(imex)
        inventory.sources["nvidia-imex-ctl-N"] = SourceStatus("nvidia-imex-ctl-N", SourceState.OK)
    return inventory


def run(inventory: Inventory, **overrides: object) -> dict[str, Finding]:
    findings = run_check(nvswitch_fabric, CHECK, inventory, overrides=overrides or None)
    subjects = [finding.subject for finding in findings]
    assert len(subjects) == len(set(subjects)), subjects
    return {finding.subject: finding for finding in findings}


def aws_18() -> str:
    return AWS_18.read_text(encoding="utf-8")


def test_healthy_gb200_tray_passes() -> None:
    findings = run(tray(imex=aws_18()))
    assert {subject: finding.status for subject, finding in findings.items()} == {
        "nvidia-imex": Status.PASS, "IMEX domain": Status.PASS, "GPU0 0000:29:00.0": Status.PASS,
        "GPU1 0000:3f:00.0": Status.PASS, "GPU2 0000:9c:00.0": Status.PASS, "GPU3 0000:b2:00.0": Status.PASS}
    assert findings["IMEX domain"].summary == "Domain State UP, 18 of 18 nodes READY"
    assert findings["IMEX domain"].evidence["this_node"] == 3
    assert findings["GPU0 0000:29:00.0"].summary == (
        f"in NVLink domain {CLUSTER}, clique 2; fabric health healthy, bandwidth full")
    assert findings["GPU2 0000:9c:00.0"].evidence["module_id"] == 4
    assert "nvidia-fabricmanager" not in findings       # a tray's switches are in the rack's switch trays


def test_tray_outside_its_domain_fails() -> None:
    outside = GpuFabric("completed", "success", 0, ZERO, health_summary="healthy", bandwidth="full")
    findings = run(tray(fabric=outside, imex=aws_18()))
    gpu0 = findings["GPU0 0000:29:00.0"]
    assert gpu0.status is Status.FAIL and gpu0.rule == "no_domain_severity"
    assert gpu0.summary.startswith(f"NVL72 tray GPU in no NVLink domain (clique 0, cluster UUID {ZERO})")
    assert "IMEX domain" not in findings and "nvidia-imex" not in findings     # no domain: IMEX not judged


def test_tray_fabric_health_and_registration() -> None:
    unhealthy = replace(IN_DOMAIN, health_summary="unhealthy", bandwidth="degraded")
    finding = run(tray(fabric=unhealthy, imex=aws_18()))["GPU1 0000:3f:00.0"]
    assert (finding.status, finding.rule) == (Status.FAIL, "health_unhealthy_severity")
    assert finding.summary == "NVL72 tray GPU fabric health unhealthy; NVLink bandwidth degraded"
    limited = run(tray(fabric=replace(IN_DOMAIN, health_summary="limited_capacity"), imex=aws_18()))
    assert limited["GPU1 0000:3f:00.0"].status is Status.WARN
    waiting = run(tray(fabric=GpuFabric("in_progress"), services={}))["GPU0 0000:29:00.0"]
    assert (waiting.status, waiting.rule) == (Status.WARN, "in_progress_severity")
    failed = run(tray(fabric=replace(IN_DOMAIN, status="error 23"), imex=aws_18()))["GPU0 0000:29:00.0"]
    assert failed.status is Status.FAIL and failed.summary.startswith("fabric state completed, status error 23")


def test_imex_domain_down_fails_and_names_this_node() -> None:
    findings = run(tray(imex=down_with_node_3_unavailable()))
    domain = findings["IMEX domain"]
    assert (domain.status, domain.rule) == (Status.FAIL, "imex_down_severity")
    assert domain.summary.startswith("Domain State DOWN")
    me = findings[f"IMEX node #3 {HERE}"]
    assert me.status is Status.FAIL and me.summary == "this node's IMEX daemon is UNAVAILABLE, not READY"
    connections = findings["IMEX connections"]
    assert connections.status is Status.WARN and connections.summary.startswith("this node's IMEX connections not")
    assert connections.summary.endswith(", ... (23 more)") and len(connections.evidence["cells"]) == 12
    assert "IMEX peers" not in findings            # the one node not READY is this one
    assert "nodes_config.cfg" in (domain.remedy or "")


def test_imex_peer_not_ready_is_named() -> None:
    # DERIVED from the real 18-node answer: node #5 UNAVAILABLE, its cells N, the domain DEGRADED.
    lines = []
    for line in aws_18().splitlines():
        if line.startswith("Node #5 "):
            line = line.replace("READY      ", "UNAVAILABLE")
        elif (row := re.fullmatch(r"(\s+(\d+)\s{8})(.*)", line)) is not None:
            cells = ["N"] * 18 if row.group(2) == "5" else row.group(3).split()
            cells[5] = "N"
            line = row.group(1) + "   ".join(cells)
        lines.append(line.replace("Domain State: UP", "Domain State: DEGRADED"))
    findings = run(tray(imex="\n".join(lines) + "\n"))
    assert (findings["IMEX domain"].status, findings["IMEX domain"].rule) == (Status.WARN, "imex_degraded_severity")
    assert findings["IMEX domain"].summary == "Domain State DEGRADED: 17 of 18 nodes READY"
    peers = findings["IMEX peers"]
    assert (peers.status, peers.rule) == (Status.WARN, "imex_peer_severity")
    assert peers.summary.startswith("1 peer not READY (#5 172.31.50.44 UNAVAILABLE)")
    assert findings["IMEX connections"].evidence["cells"] == ["3->5 N", "5->3 N"]
    assert findings["nvidia-imex"].status is Status.PASS


def test_imex_ctl_missing_is_unknown_never_pass() -> None:
    inventory = tray(recovery="recover_imex_domain")
    inventory.sources["nvidia-imex-ctl-N"] = SourceStatus("nvidia-imex-ctl-N", SourceState.MISSING,
                                                          "nvidia-imex-ctl: not found")
    findings = run(inventory)
    domain = findings["IMEX domain"]
    assert domain.status is Status.UNKNOWN
    assert domain.summary.startswith("the IMEX domain's state is not known: nvidia-imex-ctl-N is not available")
    assert "recover_imex_domain" in domain.summary and "recover_imex_domain" in (domain.remedy or "")
    assert findings["nvidia-imex"].status is Status.PASS


def test_imex_unit_and_daemon() -> None:
    # An enabled unit that is not running is a fault: the site meant it to run.
    stopped = run(tray(services={"nvidia-imex": IMEX_ENABLED_DEAD}))
    assert stopped["nvidia-imex"].status is Status.FAIL and stopped["IMEX domain"].status is Status.UNKNOWN
    # A daemon answering `-N` outside the unit (a ComputeDomain pod): the unit's state does not matter.
    in_pod = run(tray(services={"nvidia-imex": IMEX_DEAD}, imex=aws_18()))
    assert in_pod["nvidia-imex"].status is Status.PASS and in_pod["IMEX domain"].status is Status.PASS
    # An idle tray of a site that starts IMEX per job or ComputeDomain: no daemon, unit not enabled.
    idle = run(tray(services={"nvidia-imex": IMEX_DEAD}))
    assert [(finding.subject, finding.status) for finding in idle.values() if "IMEX" in finding.subject] == [
        ("IMEX domain", Status.SKIP)]
    assert "nvidia-imex" not in idle and "not enabled" in idle["IMEX domain"].summary
    strict = run(tray(services={"nvidia-imex": IMEX_DEAD}), imex_required=True)
    assert strict["nvidia-imex"].status is Status.FAIL


def test_tray_without_fabric_facts_is_unknown() -> None:
    inventory = tray(fabric=None, services={})
    inventory.sources["nvidia-smi-q"] = SourceStatus("nvidia-smi-q", SourceState.TIMEOUT, "after 10.0 s")
    finding = run(inventory)["GPU0 0000:29:00.0"]
    assert finding.status is Status.UNKNOWN
    assert finding.summary == ("NVL72 tray GPU (NVIDIA GB200) whose NVLink domain is not known: its fabric state was "
                               "not read: nvml ok; nvidia-smi-q timed out: after 10.0 s")


def test_which_gpus_are_trays_and_boards() -> None:
    gb300 = tray(name="NVIDIA GB300", platform=False).gpus[0]          # platform info not read: by name
    assert nvl72_tray(gb300) and not nvlink5_board(gb300)
    placed = replace(tray(name="NVIDIA Graphics Device").gpus[0])      # by platform info alone
    assert nvl72_tray(placed)
    nvl4 = replace(gb300, platform=GpuPlatform(None, None, None, 1, "direct_connected", 1))
    assert not nvl72_tray(nvl4) and not nvlink5_board(nvl4)
    b200 = board().gpus[0]
    assert not nvl72_tray(b200) and nvlink5_board(b200)
    h100 = replace(gpu(0), nvlink_version=6, fabric=GpuFabric("completed", "success", 0, ZERO))
    assert not nvl72_tray(h100) and not nvlink5_board(h100)


def board(*, services: dict[str, ServiceState] | None = None, virtualization: str | None = "none") -> Inventory:
    """HGX B200: NVSwitches on the baseboard, not on the PCI bus; zero clique/cluster UUID (one node)."""
    fabric = GpuFabric("completed", "success", 0, ZERO, health_summary="healthy", bandwidth="not_supported")
    gpus = [Gpu(index, name="NVIDIA B200", pci_address=f"0000:{bus:02x}:00.0", fabric=fabric, nvlink_version=7,
                platform=GpuPlatform(None, None, None, 1, "switch_connected", module), sources=("nvml",))
            for index, (bus, module) in enumerate(zip((0x8F, 0x90, 0x96, 0x97, 0xC4, 0xC5, 0xCB, 0xCC),
                                                      (6, 8, 7, 5, 2, 4, 3, 1), strict=True))]
    inventory = Inventory(host="b200-01", captured_at="2026-11-26T12:00:00Z", gpus=gpus, nvswitches=(),
                          services={"nvidia-fabricmanager": FM_UP} if services is None else services,
                          virtualization=virtualization)
    inventory.sources["systemctl-show-nvidia-fabricmanager"] = SourceStatus(
        "systemctl-show-nvidia-fabricmanager", SourceState.MISSING, "systemctl: not found")
    return inventory


def test_hgx_b200_zero_clique_passes_and_needs_the_fabric_manager() -> None:
    findings = run(board())
    assert {finding.status for finding in findings.values()} == {Status.PASS}
    assert set(findings) == {"nvidia-fabricmanager"} | {f"GPU{index} {gpu.pci_address}" for index, gpu in
                                                       enumerate(board().gpus)}
    assert findings["GPU0 0000:8f:00.0"].summary == "fabric registration completed; fabric health healthy"
    failed = ServiceState("nvidia-fabricmanager", "failed", "failed", "exit-code", 0, None)
    manager = run(board(services={"nvidia-fabricmanager": failed}))["nvidia-fabricmanager"]
    assert manager.status is Status.FAIL and "NVLink 5 GPUs whose NVSwitches sit on the baseboard" in manager.summary
    unknown = run(board(services={}))["nvidia-fabricmanager"]
    assert unknown.status is Status.UNKNOWN and "systemctl: not found" in unknown.summary
    # In a VM the host (or a service VM) runs it: the GPUs' registration is what is judged.
    assert "nvidia-fabricmanager" not in run(board(services={}, virtualization="hypervisor KVM"))


def test_h100_nodes_unchanged() -> None:
    done = GpuFabric("completed", "success", 0, ZERO)
    inventory = dgx_h100(gpus=[replace(gpu(index), fabric=done, nvlink_version=6) for index in range(8)])
    inventory.nvswitches = ("0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0")
    inventory.services = {"nvidia-fabricmanager": FM_UP}
    findings = run_check(nvswitch_fabric, CHECK, inventory, pack_name="dgx-h100")
    assert [(finding.subject, finding.status, finding.summary) for finding in findings][:2] == [
        ("nvidia-fabricmanager", Status.PASS, "nvidia-fabricmanager is running"),
        ("GPU0 0000:18:00.0", Status.PASS, "fabric registration completed")]
    assert len(findings) == 9 and {finding.status for finding in findings} == {Status.PASS}
    assert not any("IMEX" in finding.subject for finding in findings)


def test_discover_shows_the_tray_domain_clearly() -> None:
    text = render_inventory_text(tray(imex=down_with_node_3_unavailable()))
    section = text[text.index("NVLink domain"):text.index("Network interfaces")]
    assert f"cluster {CLUSTER}; clique 2\n" in section
    assert "rack chassis 1820000000001, slot 14, tray 4, host 1\n" in section
    assert "GPU2  0000:9c:00.0  4       completed/success  2       healthy  full       switch_connected  none" in section
    assert section.rstrip().endswith(
        f"IMEX: nvidia-imex active/running; Domain State DOWN, 18 nodes, 17 READY, 35 connections not C; "
        f"this node #3 {HERE} UNAVAILABLE; not READY: #3 {HERE} UNAVAILABLE")
    data = inventory_to_json(tray(imex=aws_18()))          # the JSON form keeps the whole domain
    assert data["imex"]["state"] == "UP" and len(data["imex"]["nodes"]) == 18 and data["imex"]["connections"]["3,0"] == "C"
    assert data["gpus"][0]["platform"]["chassis_serial_number"] == "1820000000001"
    board_text = render_inventory_text(board())
    assert "(all zero: in no multi-node domain)" in board_text
    assert "IMEX:" not in board_text and "rack chassis" not in board_text
    assert "NVLink domain" not in render_inventory_text(dgx_h100())        # H100: nothing to show


def test_imex_without_this_nodes_addresses_judges_the_whole_domain() -> None:
    inventory = tray(imex=down_with_node_3_unavailable())
    inventory.netdevs = []                                   # `ip -j address` not read: this node unknown
    findings = run(inventory)
    assert findings["IMEX domain"].status is Status.FAIL and findings["IMEX domain"].evidence["this_node"] is None
    assert findings["IMEX peers"].summary.startswith(f"1 peer not READY (#3 {HERE} UNAVAILABLE)")
    assert findings["IMEX connections"].summary.startswith(
        "the domain's (this node not found among its addresses) IMEX connections not `C` (connected): 0->3 N, 1->3 N")


def test_a_b200_board_without_fabric_facts_is_judged_not_skipped() -> None:
    """NVML down (or its fabric call failed and nvidia-smi -q gave nothing): the B200s are still
    known by name, so the fabric manager is judged and each GPU is unknown, never a skip."""
    inventory = board(services={"nvidia-fabricmanager": ServiceState("nvidia-fabricmanager", "inactive", "dead",
                                                                     "exit-code", 0, None, "enabled")})
    for item in inventory.gpus:
        item.fabric = None
    findings = run(inventory)
    assert findings["nvidia-fabricmanager"].status is Status.FAIL
    assert findings["GPU0 0000:8f:00.0"].status is Status.UNKNOWN
    assert "fabric registration is not known" in findings["GPU0 0000:8f:00.0"].summary


def test_a_board_gpu_name_is_never_a_tray_whatever_its_platform_info() -> None:
    """A B300 that reports a chassis serial and switch_connected (its platform info has not been
    seen) stays a board: its zero clique is normal, never "in no NVLink domain"."""
    inventory = board()
    for item in inventory.gpus:
        item.name = "NVIDIA B300 SXM6 AC"
        item.platform = GpuPlatform("1820000000009", 3, 1, 1, "switch_connected", 1)
    assert not any(nvl72_tray(item) for item in inventory.gpus) and all(nvlink5_board(item) for item in inventory.gpus)
    assert {finding.status for finding in run(inventory).values()} == {Status.PASS}
