"""The check runner: needs gate, envelopes, deadline, shadow, selection; and run_check end to end."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from netdoctor.checks.api import NEEDS, Check, CheckContext
from netdoctor.checks.engine import run_checks, select_checks
from netdoctor.checks.needs import NEED_JUDGES, gate
from netdoctor.checks.registry import Registry, builtin_check_order
from netdoctor.errors import UsageError
from netdoctor.host.types import CommandResult, CommandSpec, CommandState
from netdoctor.parsers.nccl_env import NcclSettings
from netdoctor.inventory.model import (
    Gpu,
    GpuFabric,
    Hca,
    Inventory,
    KernelLog,
    LinkLayer,
    ModuleDiagnostics,
    Netdev,
    PciPathFunction,
    PcieLink,
    Port,
    PortState,
    QosConfig,
    SourceState,
    SourceStatus,
    Topology,
)
from netdoctor.report.model import Finding, Grade, Status, grade_of
from netdoctor.probe.result import ProbeNotRun, ProbeResult
from netdoctor.run import CheckOptions, counter_history, run_check

RELEASE = threading.Event()   # set at the end of the session so hung test checks can exit


@pytest.fixture(autouse=True, scope="module")
def _release_hung_checks() -> Iterator[None]:
    yield
    RELEASE.set()


@dataclass
class FakePack:
    """The three things the runner asks of a rule pack."""

    required: frozenset[str] = frozenset()
    shadow: frozenset[str] = frozenset()
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)
    name: str = "fake"

    def section(self, check_id: str) -> Mapping[str, Any]:
        return self.sections.get(check_id, {})

    def is_shadow(self, check_id: str, rule: str | None = None) -> bool:
        return check_id in self.shadow or (rule is not None and f"{check_id}.{rule}" in self.shadow)


def _registry(*checks: Check) -> Registry:
    """A registry of test checks; one named like a built-in takes the built-in's report order."""
    builtin = builtin_check_order()
    registry = Registry()
    for item in checks:
        order = builtin.index(item.id) if item.id in builtin else item.order
        registry.register(replace(item, order=order))
    return registry


def _returning(*statuses: Status, rule: str | None = None):
    def function(context: CheckContext) -> Iterator[Finding]:
        for number, status in enumerate(statuses):
            yield context.finding(status, f"subject{number}", f"{status} here", rule=rule)
    return function


def _crashing(context: CheckContext) -> list[Finding]:
    raise RuntimeError("boom")


def _hanging(context: CheckContext) -> list[Finding]:
    RELEASE.wait(60)
    return []


def _full_inventory() -> Inventory:
    ib_port = Port("mlx5_0", 1, state=PortState.ACTIVE, link_layer=LinkLayer.INFINIBAND, counters={"symbol_error": 0})
    roce_port = Port("mlx5_1", 1, state=PortState.ACTIVE, link_layer=LinkLayer.ETHERNET, netdev="ens1f0np0")
    link = PcieLink("0000:18:00.0", current_gen=5, max_gen=5, current_width=16, max_width=16)
    return Inventory(
        host="node017", captured_at="2026-11-21T22:40:00Z",
        gpus=[Gpu(0, name="NVIDIA H100 80GB HBM3", pcie=link, nvlink_active=18, nvlink_total=18,
                  fabric=GpuFabric("completed", "success"))],
        kernel_log=KernelLog(),
        hcas=[Hca("mlx5_0", ports={1: ib_port}), Hca("mlx5_1", ports={1: roce_port})],
        netdevs=[Netdev("ens1f0np0", mtu=9000, rdma_port="mlx5_1:1", qos=QosConfig(trust="dscp", pfc_enabled=(3,)))],
        pcie={"0000:18:00.0": link},
        pci_tree={"0000:18:00.0": PciPathFunction("0000:18:00.0")},
        transceivers={"mlx5_0:1": ModuleDiagnostics("mlxlink", "OSFP")},
        nccl=NcclSettings(),
        topology=Topology(gpus=("GPU0",), nics=("NIC0",), links={("GPU0", "NIC0"): "PIX"}),
        sources={name: SourceStatus(name, SourceState.OK) for name in ("sysfs", "nvml", "ibstat", "nvidia-smi-topo-m")},
    )


def _empty_inventory(**sources: SourceState) -> Inventory:
    return Inventory(host="node001", captured_at="2026-11-21T22:40:00Z",
                     sources={name.replace("_", "-"): SourceStatus(name.replace("_", "-"), state)
                              for name, state in sources.items()})


# -- needs gate -------------------------------------------------------------------------
def test_every_need_has_a_judge_and_all_pass_on_a_full_inventory() -> None:
    assert set(NEED_JUDGES) == set(NEEDS)
    inventory = _full_inventory()
    for need, judge in NEED_JUDGES.items():
        assert judge(inventory, {"busbw_gbps": 400.0}) is None, need


def test_fabric_needs_skip_where_the_thing_is_absent_and_say_why_they_are_unknown() -> None:
    pcie_gpus = _empty_inventory(nvml=SourceState.OK)
    pcie_gpus.gpus = [Gpu(0, name="NVIDIA L40S", nvlink_active=0, nvlink_total=0)]
    assert NEED_JUDGES["nvlink"](pcie_gpus, None) == (Status.SKIP, "no NVLinks (PCIe GPUs)")
    no_log = _empty_inventory()
    no_log.sources["dmesg"] = SourceStatus("dmesg", SourceState.ERROR, "exit 1: dmesg: read kernel buffer failed: Operation not permitted")
    assert NEED_JUDGES["kernel-log"](no_log, None) == (
        Status.UNKNOWN, "the kernel log was not read: dmesg failed: exit 1: dmesg: read kernel buffer failed: Operation not permitted")
    no_fabric = _full_inventory()
    no_fabric.gpus[0].fabric = None
    no_fabric.sources["nvml"] = SourceStatus("nvml", SourceState.ERROR, "Unknown Error")
    assert NEED_JUDGES["fabric"](no_fabric, None) == (
        Status.UNKNOWN, "neither NVML's fabric state nor the PCI bus was read: nvml failed: Unknown Error")


def test_rdma_skip_when_kernel_has_no_devices() -> None:
    inventory = _empty_inventory(sysfs=SourceState.MISSING, ibstat=SourceState.ERROR)
    assert gate(Check("port-state", "x", _crashing, ("rdma",)), inventory) == (
        Status.SKIP, "no RDMA devices on this node", "rdma")


def test_rdma_unknown_when_sysfs_unreadable_and_tool_timed_out() -> None:
    inventory = _empty_inventory(sysfs=SourceState.ERROR)
    inventory.sources["sysfs"] = SourceStatus("sysfs", SourceState.ERROR, "permission denied")
    inventory.sources["ibstat"] = SourceStatus("ibstat", SourceState.TIMEOUT, "after 5.0 s")
    assert NEED_JUDGES["rdma"](inventory, None) == (Status.UNKNOWN, "sysfs failed: permission denied")


def test_gpus_skip_without_driver_unknown_on_nvml_error() -> None:
    assert NEED_JUDGES["gpus"](_empty_inventory(nvml=SourceState.MISSING), None) == (
        Status.SKIP, "no NVIDIA GPUs (no NVIDIA driver)")
    broken = _empty_inventory()
    broken.sources["nvml"] = SourceStatus("nvml", SourceState.ERROR, "NVMLError_Unknown")
    assert NEED_JUDGES["gpus"](broken, None) == (Status.UNKNOWN, "nvml failed: NVMLError_Unknown")


def test_topology_unknown_with_the_tool_reason() -> None:
    inventory = _full_inventory()
    inventory.topology = None
    inventory.sources["nvidia-smi-topo-m"] = SourceStatus("nvidia-smi-topo-m", SourceState.TIMEOUT, "after 5.0 s")
    assert NEED_JUDGES["topology"](inventory, None) == (Status.UNKNOWN, "nvidia-smi-topo-m timed out: after 5.0 s")


def test_roce_and_qos_and_ib() -> None:
    inventory = _full_inventory()
    inventory.hcas = [inventory.hcas[0]]          # InfiniBand only
    assert NEED_JUDGES["roce"](inventory, None) == (Status.SKIP, "no RoCE ports")
    assert NEED_JUDGES["ib"](inventory, None) is None
    check = Check("pfc-ecn", "x", _crashing, ("roce", "qos"))
    assert gate(check, inventory) == (Status.SKIP, "no RoCE ports", "roce")
    roce_only = _full_inventory()
    roce_only.hcas = [roce_only.hcas[1]]
    roce_only.netdevs[0].qos = None
    roce_only.sources["mlnx_qos-ens1f0np0"] = SourceStatus("mlnx_qos-ens1f0np0", SourceState.MISSING)
    assert NEED_JUDGES["ib"](roce_only, None) == (Status.SKIP, "no InfiniBand ports")
    assert NEED_JUDGES["qos"](roce_only, None) == (Status.UNKNOWN, "mlnx_qos-ens1f0np0 is not available")


def test_skip_wins_over_unknown_in_gate() -> None:
    inventory = _empty_inventory(sysfs=SourceState.MISSING)
    inventory.sources["nvml"] = SourceStatus("nvml", SourceState.ERROR, "driver/library mismatch")
    check = Check("gpudirect", "x", _crashing, ("gpus", "rdma"))
    assert gate(check, inventory) == (Status.SKIP, "no RDMA devices on this node", "rdma")


def test_probe_need() -> None:
    inventory = _full_inventory()
    assert NEED_JUDGES["probe"](inventory, None) == (Status.SKIP, "the NCCL probe was not run")
    assert NEED_JUDGES["probe"](inventory, ProbeNotRun("--no-probe")) == (
        Status.SKIP, "the NCCL probe was not run: --no-probe")
    assert NEED_JUDGES["probe"](inventory, ProbeNotRun("libnccl not found", unknown=True)) == (
        Status.UNKNOWN, "the NCCL probe did not give a result: libnccl not found")
    assert NEED_JUDGES["probe"](inventory, ProbeResult(status="ok")) is None


# -- runner -----------------------------------------------------------------------------
def _deadline(seconds: float = 5.0) -> float:
    return time.monotonic() + seconds


def test_findings_in_registry_order_with_outcomes() -> None:
    registry = _registry(Check("zz-extra", "x", _returning(Status.PASS)),
                         Check("link-speed", "x", _returning(Status.FAIL, Status.PASS)),
                         Check("port-state", "x", _returning(Status.PASS, Status.WARN)))
    findings, outcomes = run_checks(_full_inventory(), FakePack(required=frozenset({"link-speed"})), registry,
                                    deadline=_deadline())
    assert [finding.check for finding in findings] == ["port-state", "port-state", "link-speed", "link-speed", "zz-extra"]
    assert [(outcome.check, outcome.status, outcome.required) for outcome in outcomes] == [
        ("port-state", Status.WARN, False), ("link-speed", Status.FAIL, True), ("zz-extra", Status.PASS, False)]


def test_crashing_check_becomes_one_unknown_finding() -> None:
    registry = _registry(Check("port-state", "x", _crashing), Check("mtu", "x", _returning(Status.PASS)))
    findings, outcomes = run_checks(_full_inventory(), FakePack(), registry, deadline=_deadline())
    crashed = [finding for finding in findings if finding.check == "port-state"]
    assert len(crashed) == 1
    assert crashed[0].status is Status.UNKNOWN
    assert crashed[0].subject == "node"
    assert crashed[0].summary == "check crashed: RuntimeError: boom"
    assert "duration_s" in crashed[0].evidence
    assert outcomes[0].error == "check crashed: RuntimeError: boom"
    assert [finding.status for finding in findings if finding.check == "mtu"] == [Status.PASS]


def test_debug_reraises_the_crash() -> None:
    with pytest.raises(RuntimeError, match="boom"):
        run_checks(_full_inventory(), FakePack(), _registry(Check("mtu", "x", _crashing)),
                   deadline=_deadline(), debug=True)


def test_bad_yield_is_a_crash() -> None:
    def yields_text(context: CheckContext) -> Iterator[Any]:
        yield "all good"

    findings, _ = run_checks(_full_inventory(), FakePack(), _registry(Check("mtu", "x", yields_text)),
                             deadline=_deadline())
    assert findings[0].summary == "check crashed: TypeError: yielded str, not a Finding"


def test_hanging_check_is_unknown_at_the_deadline_and_the_rest_report() -> None:
    registry = _registry(Check("port-state", "x", _returning(Status.PASS)), Check("zz-hang", "x", _hanging))
    started = time.monotonic()
    findings, outcomes = run_checks(_full_inventory(), FakePack(), registry, deadline=started + 0.5)
    elapsed = time.monotonic() - started
    assert elapsed < 1.5
    hung = [finding for finding in findings if finding.check == "zz-hang"]
    assert len(hung) == 1 and hung[0].status is Status.UNKNOWN
    assert hung[0].summary.startswith("deadline reached: check zz-hang had not finished after 0.")
    assert outcomes[1].error == "deadline reached"
    assert findings[0].status is Status.PASS


def test_gated_check_gives_one_node_finding_and_does_not_run() -> None:
    ran: list[str] = []

    def recording(context: CheckContext) -> list[Finding]:
        ran.append(context.check_id)
        return []

    registry = _registry(Check("pfc-ecn", "x", recording, ("roce",)))
    inventory = _empty_inventory(sysfs=SourceState.MISSING)
    findings, outcomes = run_checks(inventory, FakePack(), registry, deadline=_deadline())
    assert ran == []
    assert findings == [Finding("pfc-ecn", Status.SKIP, "node", "no RDMA devices on this node", {"need": "roce"})]
    assert outcomes[0].status is Status.SKIP


def test_check_without_findings_reports_nothing_to_judge() -> None:
    findings, outcomes = run_checks(_full_inventory(), FakePack(), _registry(Check("mtu", "x", _returning())),
                                    deadline=_deadline())
    assert [(finding.status, finding.summary) for finding in findings] == [(Status.SKIP, "nothing to judge on this node")]


def test_shadow_findings_do_not_change_the_grade() -> None:
    registry = _registry(Check("mtu", "x", _returning(Status.FAIL)),
                         Check("error-counters", "x", _returning(Status.FAIL, rule="symbol_error_rate")),
                         Check("port-state", "x", _returning(Status.PASS)))
    pack = FakePack(shadow=frozenset({"mtu", "error-counters.symbol_error_rate"}))
    findings, outcomes = run_checks(_full_inventory(), pack, registry, deadline=_deadline())
    assert [finding.shadow for finding in findings] == [False, True, True]
    assert grade_of(findings, pack.required) is Grade.PASS
    unshadowed, _ = run_checks(_full_inventory(), FakePack(), registry, deadline=_deadline())
    assert grade_of(unshadowed, frozenset()) is Grade.FAIL


def test_required_unknown_makes_the_grade_unknown() -> None:
    registry = _registry(Check("port-state", "x", _crashing), Check("mtu", "x", _returning(Status.WARN)))
    findings, _ = run_checks(_full_inventory(), FakePack(), registry, deadline=_deadline())
    assert grade_of(findings, frozenset()) is Grade.WARN
    assert grade_of(findings, frozenset({"port-state"})) is Grade.UNKNOWN


def test_only_and_skip_select_and_unknown_ids_are_usage_errors() -> None:
    registry = _registry(*(Check(check_id, "x", _noop_check) for check_id in ("port-state", "mtu", "link-speed")))
    assert [check.id for check in select_checks(registry, only=["mtu", "port-state"])] == ["port-state", "mtu"]
    assert [check.id for check in select_checks(registry, skip=["mtu"])] == ["port-state", "link-speed"]
    with pytest.raises(UsageError) as raised:
        select_checks(registry, only=["port-sate"])
    assert str(raised.value) == "--only: unknown check id port-sate; valid ids: port-state, link-speed, mtu"
    with pytest.raises(UsageError, match="--skip: unknown check id nope"):
        run_checks(_full_inventory(), FakePack(), registry, skip=["nope"], deadline=_deadline())


def _noop_check(context: CheckContext) -> list[Finding]:
    return []


# -- run_check end to end over a fake node ------------------------------------------------
class EmptySys:
    """A /sys with nothing in it: no RDMA devices, no netdevs, no modules."""

    def read(self, path: str) -> str | None:
        return None

    def listdir(self, path: str) -> list[str]:
        return []

    def is_dir(self, path: str) -> bool:
        return False

    def exists(self, path: str) -> bool:
        return False

    def link_name(self, path: str) -> str | None:
        return None


@dataclass
class FakeSource:
    """A node without tools, GPUs or HCAs; `hang_s` makes NVML hang like a wedged driver."""

    host: str = "fakenode"
    captured_at: str = "2026-11-21T22:40:00Z"
    boot_id: str | None = "boot-1"
    is_snapshot: bool = True
    hang_s: float = 0.0
    sys: EmptySys = field(default_factory=EmptySys)

    def run(self, specs: list[CommandSpec], deadline: float | None = None) -> dict[str, CommandResult]:
        return {spec.name: CommandResult(spec.name, CommandState.MISSING, argv=spec.argv) for spec in specs}

    def nvml(self) -> tuple[dict[str, Any] | None, str]:
        if self.hang_s:
            RELEASE.wait(self.hang_s)
        return None, "no NVIDIA driver"

    def netdevs(self) -> list[Any]:
        return []

    def nccl_env(self) -> dict[str, Any] | None:
        return None

    def proc(self, name: str) -> str | None:
        return None


def test_run_check_grades_and_reports_plugin_problems() -> None:
    registry = _registry(Check("port-state", "x", _returning(Status.PASS), ("rdma",)),
                         Check("zz-warn", "x", _returning(Status.WARN)))
    registry.problem("/etc/netdoctor/plugins.d/bad.py", "plugin failed to load: SyntaxError: bad")
    report = run_check(CheckOptions(rules="default", no_probe=True), source=FakeSource(), registry=registry, env={})
    assert report.host == "fakenode"
    assert report.rules == "default"
    assert report.grade is Grade.WARN
    assert [(finding.check, finding.status) for finding in report.findings] == [
        ("plugins", Status.UNKNOWN), ("port-state", Status.SKIP), ("zz-warn", Status.WARN)]
    assert report.probe is None
    assert report.started_at.endswith("Z")


def test_run_check_reports_by_the_deadline_when_a_check_hangs() -> None:
    registry = _registry(Check("zz-hang", "x", _hanging), Check("mtu", "x", _returning(Status.PASS)))
    started = time.monotonic()
    report = run_check(CheckOptions(rules="default", no_probe=True, deadline_s=1.5), source=FakeSource(),
                       registry=registry, env={})
    assert time.monotonic() - started < 1.5 + 1.0
    hung = [finding for finding in report.findings if finding.check == "zz-hang"]
    assert hung[0].summary.startswith("deadline reached")
    assert report.grade is Grade.PASS     # zz-hang is not required by the default pack


def test_a_hung_nvml_costs_its_facts_not_the_run() -> None:
    """NVML blocking in a wedged driver: discovery gives up on it at its deadline and judges
    what answered; the report names the hung source (0.1 made the whole run one unknown)."""
    registry = _registry(Check("mtu", "x", _returning(Status.PASS)))
    started = time.monotonic()
    report = run_check(CheckOptions(rules="default", no_probe=True, deadline_s=1.0), source=FakeSource(hang_s=30),
                       registry=registry, env={})
    assert time.monotonic() - started < 1.0 + 1.0
    assert [(finding.check, finding.subject, finding.status) for finding in report.findings] == [
        ("discovery", "nvml", Status.UNKNOWN), ("mtu", "subject0", Status.PASS)]
    assert "NVML did not answer" in report.findings[0].summary
    assert report.grade is Grade.PASS       # nothing the default pack requires needed NVML


@dataclass
class HangingSys(EmptySys):
    """A /sys whose every read blocks, like a driver attribute stuck in the kernel."""

    def read(self, path: str) -> str | None:
        RELEASE.wait(30)
        return None

    def listdir(self, path: str) -> list[str]:
        RELEASE.wait(30)
        return []

    def is_dir(self, path: str) -> bool:
        RELEASE.wait(30)
        return False

    def exists(self, path: str) -> bool:
        RELEASE.wait(30)
        return False


def test_run_check_reports_unknown_when_discovery_hangs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.getloadavg", lambda: (48.0, 40.0, 30.0))
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    registry = _registry(Check("mtu", "x", _returning(Status.PASS)))
    started = time.monotonic()
    report = run_check(CheckOptions(rules="default", no_probe=True, deadline_s=1.0),
                       source=FakeSource(sys=HangingSys()), registry=registry, env={})
    assert time.monotonic() - started < 1.0 + 1.0
    assert report.grade is Grade.UNKNOWN
    assert report.findings[0].check == "discovery"
    assert report.findings[0].summary.startswith("discovery did not finish before the deadline: the machine is "
                                                 "loaded (load average 48.0 on 2 CPUs)")


def test_built_in_checks_are_not_waited_for_as_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no third-party plugin configured nothing is blamed on plugins, however slow the
    machine (0.1 said "third-party plugins did not finish loading" with none installed)."""
    from netdoctor import run

    monkeypatch.setattr(run, "third_party_configured", lambda plugin_dirs: False)
    registry = run._load_plugins((), wait_s=0.0)
    assert not registry.problem_findings() and "port-state" in registry


def test_run_check_probe_is_skipped_on_snapshot_and_with_no_probe() -> None:
    seen: list[Mapping[str, Any] | None] = []

    def probe_check(context: CheckContext) -> list[Finding]:
        seen.append(context.probe)
        return []

    registry = _registry(Check("nccl-probe", "x", probe_check, ("probe",)))
    report = run_check(CheckOptions(rules="default", no_probe=True), source=FakeSource(), registry=registry, env={})
    assert report.findings[0].summary == "the NCCL probe was not run: --no-probe"
    assert report.findings[0].status is Status.SKIP
    report = run_check(CheckOptions(rules="default"), source=FakeSource(), registry=registry, env={})
    assert report.findings[0].summary.startswith("the NCCL probe was not run: a snapshot is judged")
    assert seen == []


# -- counter history wiring ---------------------------------------------------------------
def _counters_registry() -> Registry:
    return _registry(Check("zz-counters", "x", _returning(Status.PASS), ("counters",)))


def test_snapshot_run_never_writes_state_unless_asked(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    run_check(CheckOptions(rules="default", no_probe=True), source=FakeSource(is_snapshot=True),
              registry=_counters_registry(), env={"NETDOCTOR_STATE": str(state)})
    assert not state.exists()
    run_check(CheckOptions(rules="default", no_probe=True, state=state), source=FakeSource(is_snapshot=True),
              registry=_counters_registry(), env={})
    assert json.loads(state.read_text())["entries"][0]["host"] == "fakenode"


def test_live_run_uses_NETDOCTOR_STATE(tmp_path: Path) -> None:
    state = tmp_path / "deep" / "state.json"
    report = run_check(CheckOptions(rules="default", no_probe=True), source=FakeSource(is_snapshot=False),
                       registry=_counters_registry(), env={"NETDOCTOR_STATE": str(state)})
    assert report.grade is Grade.PASS
    assert json.loads(state.read_text())["entries"][0]["boot_id"] == "boot-1"


def test_unwritable_state_does_not_break_the_run(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    options = CheckOptions(rules="default", no_probe=True, state=blocker / "state.json")
    report = run_check(options, source=FakeSource(is_snapshot=False), registry=_counters_registry(), env={})
    assert [finding.check for finding in report.findings] == ["zz-counters"]
    assert counter_history(options, Inventory("h", "2026-11-21T22:40:00Z"), {}, is_snapshot=False) == (None, [])


def test_the_probe_command_is_this_pipeline_with_the_probe_checks_alone() -> None:
    """`netdoctor probe` selects the checks whose needs include "probe" and marks them
    required whatever the pack says (so their `unknown` would be the grade)."""
    registry = _registry(Check("zz-fail", "x", _returning(Status.FAIL)),
                         Check("nccl-probe", "x", _returning(Status.PASS), ("probe",)),
                         Check("nic-loopback", "x", _returning(Status.PASS), ("probe",)))
    report = run_check(CheckOptions(rules="default", probe_only=True, probe_budget_s=5.0), source=FakeSource(),
                       registry=registry, env={})
    assert [outcome.check for outcome in report.checks] == ["nccl-probe", "nic-loopback"]
    assert all(outcome.required for outcome in report.checks)
    # A snapshot is not probed: both probe checks skip, and the node is not failed by zz-fail.
    assert [finding.status for finding in report.findings] == [Status.SKIP, Status.SKIP]
    assert report.grade is Grade.PASS and report.probe is None
