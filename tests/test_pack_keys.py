"""Thresholds live only in rule packs: every key a check reads is in rules/default.toml, and
every key of default.toml's check sections is read by some check.

Two views, because neither alone is enough:

- **Recorded reads.** Every built-in check runs on every fixture node (the snapshots under
  tests/fixtures/nodes and tests/data/device, with and without a counter history) and on
  hand-built nodes where every counter grew and every MTU is too small, under every
  bundled pack, with a pack whose sections record each key asked for. This sees keys made
  at run time (`f"{spec.name}_per_hour"`, `f"{key}_min_mtu"`) and keys passed through
  helpers (`_fraction_rule(ctx, "pass_fraction")`), but only on branches some node reaches.
- **A static scan** of the plugin modules for `ctx.rule(...)` / `ctx.severity(...)` calls.
  A literal key is seen on every branch, including those no node reaches (a setting read
  only when a switch that is off by default is on, such as `port_xmit_wait_per_second`).
  An f-string key cannot be read statically; the scan turns it into a pattern, and the
  test requires a recorded read to match each one, so a computed key whose call site no
  node reaches fails the test instead of slipping through.

A key is "read" when either view saw it; a literal key and every recorded key must exist
in default.toml.
"""

from __future__ import annotations

import ast
import copy
import json
import re
import time
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from inventory_factory import dgx_h100, efa_node, history_of, roce_node
from netdoctor.checks.api import Check, CheckContext, CounterHistory
from netdoctor.checks.history import nvlink_key
from netdoctor.checks.needs import gate
from netdoctor.checks.registry import Registry
from netdoctor.probe.result import ProbeResult
from netdoctor.errors import RulesError
from netdoctor.inventory.model import GpuFabric, Inventory, NvLink, ServiceState, SourceState, SourceStatus
from netdoctor.packs import RulePack, bundled_packs, load_rules
from netdoctor.probe.loopback import LoopbackResult, Rail, RailResult
from netdoctor.run import discover, open_source

TESTS = Path(__file__).parent
PLUGINS = TESTS.parent / "plugins"
DEVICE = TESTS / "data" / "device" / "nvidia-h200-x2"


class RecordingSection(Mapping[str, Any]):
    """A check's section that notes every key asked for, present or not."""

    def __init__(self, values: Mapping[str, Any], asked: set[str]) -> None:
        self._values = dict(values)
        self._asked = asked

    def __getitem__(self, key: str) -> Any:
        self._asked.add(key)
        return self._values[key]

    def __contains__(self, key: object) -> bool:
        self._asked.add(str(key))
        return key in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


@dataclass
class RecordingPack(RulePack):
    asked: dict[str, set[str]] = field(default_factory=dict)

    def section(self, check_id: str) -> Mapping[str, Any]:
        return RecordingSection(super().section(check_id), self.asked.setdefault(check_id, set()))


def recording(pack: RulePack, asked: dict[str, set[str]]) -> RecordingPack:
    return RecordingPack(pack.name, pack.description, pack.selection_reason, pack.files, pack.data,
                         pack.port_classes, asked=asked)


def builtin_checks() -> list[Check]:
    registry = Registry()
    registry.load_builtins()
    return registry.checks()


def default_sections() -> dict[str, set[str]]:
    pack = load_rules("default", env={})
    return {name: set(pack.section(name)) for name in pack.check_sections()}


def fixture_inventories() -> list[tuple[Inventory, str | None]]:
    """Each fixture node and device capture, with the one pack it is judged under: a faulted
    variant under its own (INDEX.toml `rules`); healthy nodes and captures (None) under every pack."""
    nodes = TESTS / "fixtures" / "nodes"
    index = tomllib.loads((nodes / "INDEX.toml").read_text(encoding="utf-8"))["fixtures"]
    snapshots: list[tuple[Path, str | None]] = [
        (path, None if index[path.name]["fault"] == "none" else index[path.name]["rules"])
        for path in sorted(nodes.iterdir()) if path.is_dir()]
    snapshots += [(path, None) for path in sorted((TESTS / "data" / "device").glob("*/capture.tar.gz"))]
    inventories = []
    for snapshot, pack in snapshots:
        with open_source(snapshot) as source:
            inventories.append((discover(source, deadline=time.monotonic() + 60), pack))
    return inventories


def everything_wrong() -> list[Inventory]:
    """Hand-built nodes where every counter is high, every MTU below the packs' minimum, a GPU
    is missing from NVML, and (on a copy) the driver does not answer at all."""
    nodes = [dgx_h100(), roce_node(mtu=1500), efa_node(FI_PROVIDER="tcp", FI_EFA_USE_DEVICE_RDMA="0")]
    for inventory in nodes:
        for port in inventory.ports:
            port.counters = {name: 1000 for name in port.counters}       # below the 16-bit maximum
            port.hw_counters = {name: 10**6 for name in port.hw_counters}
            port.active_mtu = 1024
        for netdev in inventory.netdevs:
            netdev.mtu = 1500
        inventory.pci_gpus = {**{gpu.pci_address: "0x2330" for gpu in inventory.gpus if gpu.pci_address},
                              "0000:e0:00.0": "0x2330"}
    # NVLinks with high error counters, a GPU with links down, fabric registration stuck, the
    # fabric manager restarting (nvlink, nvswitch-fabric).
    fabric_states = ("in_progress", "not_started", "completed")
    nodes[0].gpus = [replace(gpu, nvlink_total=18, nvlink_active=16 if gpu.index == 0 else 18, nvlink_version=6,
                             nvlinks=tuple(NvLink(link, active=not (gpu.index == 0 and link < 2), speed_mbps=26562,
                                                  errors={"replay": 50000, "recovery": 0, "crc_flit": 0, "crc_data": 0})
                                           for link in range(18)),
                             fabric=GpuFabric(fabric_states[gpu.index % 3], "success", 1, "9f1c6a9e-1d1b-4c1e-9a42-2b3a0f6c7d11"))
                     for gpu in nodes[0].gpus]
    nodes[0].nvswitches = ("0000:05:00.0",)
    nodes[0].services = {"nvidia-fabricmanager": ServiceState("nvidia-fabricmanager", "active", "running", "success", 5),
                         "nvidia-imex": ServiceState("nvidia-imex", "failed", "failed", "exit-code", 0)}
    driver_down = copy.deepcopy(nodes[0])
    driver_down.sources["nvml"] = SourceStatus("nvml", SourceState.ERROR, "Driver/library version mismatch")
    return [*nodes, driver_down]


def grown(inventory: Inventory) -> CounterHistory:
    """A previous reading an hour ago in which every counter was 0 (or 1): everything grew."""
    history = history_of(inventory, changes={
        port.name: {**{name: 0 for name in port.counters}, **{f"hw_counters/{name}": 1 for name in port.hw_counters}}
        for port in inventory.ports})
    links = {nvlink_key(gpu, link.link): {name: 0 for name in link.errors} for gpu in inventory.gpus for link in gpu.nvlinks}
    return replace(history, ports={**history.ports, **links})


def probe_results() -> list[ProbeResult]:
    """Recorded probe results of a real node, and the failure shapes the check grades from the pack."""
    recorded = [json.loads((DEVICE / name).read_text(encoding="utf-8"))["probe"]
                for name in ("probe-report.json", "probe-report-p2p-disabled.json")]
    slow = copy.deepcopy(recorded[0])
    slow["sizes"][-1]["busbw_gbps"] = 1.0
    shapes = [*recorded, slow, {"status": "timeout", "reason": "probe timed out after 30 s"},
              {"status": "wrong-result", "reason": "sum off by 3"}]
    return [ProbeResult.from_json(shape) for shape in shapes]


def loopback_results(inventory: Inventory) -> list[LoopbackResult]:
    """NIC loopback outcomes over the inventory's active ports: at line rate, slow, one rail at half
    its siblings, GPUDirect not used, sockets, a timeout; and no engine at all."""
    rails = tuple(Rail(port.name, port.hca, port.number, 0, "PIX in nvidia-smi topo -m", 400.0)
                  for port in inventory.ports if port.is_active)
    def results(bandwidth: float, **first: object) -> tuple[RailResult, ...]:
        return tuple(RailResult(rail.port, 0, "nccl", "ok", bandwidth_gbps=bandwidth, transport="NET/IB/GDRDMA", gdr=True)
                     if position else replace(RailResult(rail.port, 0, "nccl", "ok", bandwidth_gbps=bandwidth / 2,
                                                         transport="NET/IB/GDRDMA", gdr=True), **first)
                     for position, rail in enumerate(rails))
    return [LoopbackResult("nccl", results(380.0), requested=rails), LoopbackResult("nccl", results(300.0), requested=rails),
            LoopbackResult("nccl", results(380.0, transport="NET/IB", gdr=False), requested=rails),
            LoopbackResult("nccl", results(380.0, transport="NET/Socket", gdr=False), requested=rails),
            LoopbackResult("nccl", results(380.0, status="timeout", reason="killed"), requested=rails),
            LoopbackResult(None, skipped="no traffic engine", requested=rails)]


@pytest.fixture(scope="module")
def recorded_reads() -> dict[str, set[str]]:
    asked: dict[str, set[str]] = {}
    checks = builtin_checks()
    runs: list[tuple[Inventory, CounterHistory | None, str | None]] = []
    for inventory, own_pack in fixture_inventories() + [(node, None) for node in everything_wrong()]:
        runs += [(inventory, None, own_pack), (inventory, grown(inventory), own_pack)]
    for name in bundled_packs():
        pack = recording(load_rules(name, env={}), asked)
        for inventory, history, own_pack in runs:
            if own_pack is not None and own_pack != name:
                continue
            for check in checks:
                probes: list[ProbeResult | None] = probe_results() if "probe" in check.needs else [None]
                loopbacks = loopback_results(inventory) if "loopback" in check.needs else [None]
                for probe, loopback in [(probe, loopback) for probe in probes for loopback in loopbacks]:
                    if gate(check, inventory, probe, loopback) is not None:
                        continue
                    try:
                        list(check.function(CheckContext(check.id, inventory, pack, history=history, probe=probe,
                                                         loopback=loopback)))
                    except RulesError:
                        pass     # a key the pack lacks: recorded, and reported by the tests below
    return asked


@dataclass(frozen=True)
class StaticRead:
    module: str
    line: int
    key: str | None             # a literal key
    pattern: re.Pattern[str] | None = None   # an f-string key, as a pattern


def _key_pattern(node: ast.JoinedStr) -> re.Pattern[str]:
    parts = [re.escape(value.value) if isinstance(value, ast.Constant) else r"[A-Za-z0-9_]+"
             for value in node.values]
    return re.compile("".join(parts))


def static_reads() -> dict[str, list[StaticRead]]:
    """`ctx.rule(KEY)` / `ctx.severity(KEY)` calls of each built-in check's module, by check id."""
    reads: dict[str, list[StaticRead]] = {}
    for check in builtin_checks():
        found = reads.setdefault(check.id, [])
        for module, tree in _check_modules(check.function.__module__.rpartition(".")[2]):
            found.extend(_reads_in(module, tree))
    return reads


def _check_modules(module: str) -> list[tuple[str, ast.Module]]:
    """The check's module and the helper modules of plugins/ it imports (its `ctx` reads may
    live there: netdoctor_plugins.xid_catalog, nccl_env_socket)."""
    tree = ast.parse((PLUGINS / f"{module}.py").read_text(encoding="utf-8"))
    helpers = sorted({node.module.rpartition(".")[2] for node in ast.walk(tree)
                      if isinstance(node, ast.ImportFrom) and node.module
                      and node.module.startswith("netdoctor_plugins.")})
    return [(module, tree)] + [(name, ast.parse((PLUGINS / f"{name}.py").read_text(encoding="utf-8")))
                               for name in helpers if name != module]


def _reads_in(module: str, tree: ast.Module) -> list[StaticRead]:
    found: list[StaticRead] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("rule", "severity") and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "ctx" and node.args):
            continue
        key = node.args[0]
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            found.append(StaticRead(module, node.lineno, key.value))
        elif isinstance(key, ast.JoinedStr):
            found.append(StaticRead(module, node.lineno, None, _key_pattern(key)))
    return found


def test_every_key_a_check_reads_is_in_the_default_pack(recorded_reads: dict[str, set[str]]) -> None:
    sections = default_sections()
    for check_id, keys in recorded_reads.items():
        missing = keys - sections.get(check_id, set())
        assert not missing, f"[{check_id}] reads {sorted(missing)}, which rules/default.toml lacks"
    for check_id, reads in static_reads().items():
        for read in reads:
            if read.key is not None:
                assert read.key in sections.get(check_id, set()), (
                    f"{read.module}.py:{read.line} reads [{check_id}] {read.key}, which rules/default.toml lacks")


def test_every_computed_key_site_is_reached(recorded_reads: dict[str, set[str]]) -> None:
    for check_id, reads in static_reads().items():
        for read in reads:
            if read.pattern is not None:
                assert any(read.pattern.fullmatch(key) for key in recorded_reads.get(check_id, ())), (
                    f"{read.module}.py:{read.line}: no node reached the key {read.pattern.pattern!r}; "
                    "add a node (or a hand-built one here) that does")


def test_every_key_of_the_default_pack_is_read_by_some_check(recorded_reads: dict[str, set[str]]) -> None:
    statically = {check_id: {read.key for read in reads if read.key} for check_id, reads in static_reads().items()}
    for check_id, keys in default_sections().items():
        assert check_id in statically, f"rules/default.toml has [{check_id}], which no built-in check declares"
        unread = keys - recorded_reads.get(check_id, set()) - statically[check_id]
        assert not unread, f"rules/default.toml [{check_id}] has {sorted(unread)}, which no check reads"


def test_every_built_in_check_is_covered(recorded_reads: dict[str, set[str]]) -> None:
    # Each check ran somewhere and read its section: the recorded view is not empty by accident.
    sections = default_sections()
    for check in builtin_checks():
        if check.id in sections:
            assert recorded_reads.get(check.id), f"{check.id} never ran on any node"


def test_a_key_missing_from_the_pack_names_the_check_and_key() -> None:
    pack = load_rules("default", env={})
    context = CheckContext("mtu", dgx_h100(), pack)
    assert context.rule("ib_mtu") == 4096
    with pytest.raises(RulesError, match=r"\[mtu\] ib_active_mtu"):
        context.rule("ib_active_mtu")
    with pytest.raises(RulesError, match=r"\[mtu\] nope_severity"):
        context.severity("nope_severity")
