"""Remedies a user can paste: every command names the finding's real device, port, netdev, PCI
address or GPU index; no `<dev>`, `DEV`, `-i N`, `ens[1-8]np0`, `mlx5_*`, `ensX` or `$DEV`.

Each remedy is read two ways (`problems`): for placeholders (the patterns below), and for the
names it gives, which must all be this node's (RDMA devices and ports, netdevs, PCI functions, GPU
indices of the inventory the checks judged).

What is judged: every fixture node of tests/fixtures/nodes whose INDEX.toml entry expects a
finding that is not pass/skip (a healthy fixture has no finding that carries a remedy), each
fixture pair with a baseline judged against it (counter growth), and the real H200 capture: 70
runs. Judging all 91 fixtures with the pack auto-selected cost 14.8 s of CPU on the 2-core
machine (plus the 9 baselines); these 70, each with its pack named, 7.4 s. They reach every check
that gives remedies without the probe (test_every_check_that_gives_remedies_is_reached); the
probe's checks, a RoCE LAG bond, an unknown netdev and a GCP GPU NIC are built below.
"""

from __future__ import annotations

import copy
import re
import time
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from unittest import mock

import pytest

import netdoctor.run as run_module
from inventory_factory import (
    CAPTURED_AT,
    dgx_h100,
    h100_gpus,
    only,
    pack,
    roce_hca,
    roce_netdev,
    roce_node,
    run_check,
    sources,
)
from netdoctor.checks.api import CheckContext
from netdoctor.checks.registry import Registry
from netdoctor.inventory.model import Gid, Inventory, Netdev, SourceState
from netdoctor.parsers.nccl_env import nccl_settings
from netdoctor.probe.loopback import LoopbackResult, Rail, RailResult
from netdoctor.probe.result import ProbeResult
from netdoctor.report.model import Finding, Report, Status
from netdoctor.run import CheckOptions, discover, open_source
from netdoctor_plugins.fabric_netdevs import fabric_netdevs
from netdoctor_plugins.nccl_env import nccl_env
from netdoctor_plugins.nccl_probe import nccl_probe
from netdoctor_plugins.nic_loopback import nic_loopback
from netdoctor_plugins.pfc_ecn import pfc_ecn
from netdoctor_plugins.phy import phy
from netdoctor_plugins.transceiver import transceiver

TESTS = Path(__file__).resolve().parent
NODES = TESTS / "fixtures" / "nodes"
CAPTURE = TESTS / "data" / "device" / "nvidia-h200-x2" / "capture.tar.gz"
INDEX = tomllib.loads((NODES / "INDEX.toml").read_text(encoding="utf-8"))["fixtures"]

# -- what a pasteable remedy never holds ------------------------------------------------------------
PLACEHOLDERS = {
    "an <angle-bracket> placeholder": re.compile(r"<[A-Za-z_][\w -]*>"),
    "a [1-8] range glob": re.compile(r"\[\d+-\d+\]"),
    "a * glob in a name": re.compile(r"[\w.:/-]\*|\*[\w.]"),
    "a shell variable": re.compile(r"\$\{?[A-Za-z_]"),
    "a placeholder word": re.compile(r"\b(?:DEV|NETDEV|IFACE|IFNAME|IF|ADDRESS|BDF|SECONDS)\b"),
    "an X/N name": re.compile(r"\b(?:ens|enp|eno|eth|ibp|ibs|ib|bond|rdmap|efa_?|mlx[45]_(?:bond_)?|GPU)[XN]"
                              r"(?:\b|np\d|s\d|f\d)"),
    "a placeholder argument (-i N)": re.compile(r"(?<![\w-])-[A-Za-z]{1,2} [NX]\b"),
}

# -- the names a remedy gives -----------------------------------------------------------------------
# A command's argument: a device, netdev, PCI function or GPU index always holds a digit (prose after a
# command's name, `ethtool reads`, does not; a name without one, `ensX`, is a placeholder above).
NAME = r"([A-Za-z0-9][\w.:-]*\d[\w.:-]*|\d+)"
RDMA_NAME = re.compile(r"\b((?:mlx[45]_(?:bond_)?\d+|rdmap\w+|efa_\d+)(?::\d+)?)\b")
NETDEV_NAME = re.compile(r"\b((?:ens\d|enp\d|eno\d|eth\d|ibp\d|ibs\d|ib\d|bond\d)[\w.]*)")
PCI_ADDRESS = re.compile(r"\b([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\b")
# Where a command takes an RDMA device (or, for mlxconfig, a PCI function), a netdev, a PCI function, a GPU.
DEVICE_ARGUMENTS = re.compile(r"(?:mlxlink|mlxconfig|ibv_devinfo|ib_write_bw)\b[^`;|]*?\s-d\s+" + NAME
                              + r"|(?:perfquery|sminfo)\b[^`;|]*?\s-C\s+" + NAME
                              + r"|\b(?:ibstat|show_gids)\s+" + NAME + r"|/sys/class/infiniband/" + NAME)
NETDEV_ARGUMENTS = re.compile(r"mlnx_qos\s+-i\s+" + NAME + r"|ethtool\s+(?:-[A-Za-z]\s+)?" + NAME
                              + r"|ip link set\s+" + NAME + r"|ip -br addr show\s+" + NAME
                              + r"|/sys/class/net/" + NAME)
PCI_ARGUMENTS = re.compile(r"(?:lspci|setpci)\b[^`;|]*?\s-s\s+" + NAME)
GPU_ARGUMENTS = re.compile(r"(?:nvidia-smi|dcgmi)\b[^`;|]*?\s-i\s+" + NAME + r"|--use_cuda=" + NAME)


def _captured(pattern: re.Pattern[str], text: str) -> Iterator[str]:
    for match in pattern.finditer(text):
        for group in match.groups():
            if group:
                yield group.rstrip(".:")


def _pci_functions(inventory: Inventory) -> set[str]:
    found = {address for address in [*(gpu.pci_address for gpu in inventory.gpus),
                                     *(hca.pci_address for hca in inventory.hcas),
                                     *(netdev.pci_address for netdev in inventory.netdevs)] if address}
    found.update(inventory.pcie, inventory.pci_gpus or {}, inventory.pci_efa or {}, inventory.pci_nics or {},
                 inventory.nvswitches or ())
    for address, function in (inventory.pci_tree or {}).items():
        found.add(address)
        if function.parent:
            found.add(function.parent)
    return {address.lower() for address in found}


def problems(remedy: str, inventory: Inventory) -> list[str]:
    """What keeps `remedy` from being pasted on this node: placeholders, and names it does not have."""
    found = [f"{what}: {match.group(0)!r}" for what, pattern in PLACEHOLDERS.items()
             for match in pattern.finditer(remedy)]
    devices = {hca.name for hca in inventory.hcas}
    ports = {port.name for port in inventory.ports}
    netdevs = {netdev.name for netdev in inventory.netdevs} | {port.netdev for port in inventory.ports if port.netdev}
    pci = _pci_functions(inventory)
    # A GPU by NVML index, or by PCI address (one NVML lost is still on the bus: nvidia-smi says why).
    gpus = ({str(gpu.index) for gpu in inventory.gpus} | {gpu.pci_address for gpu in inventory.gpus if gpu.pci_address}
            | set(inventory.pci_gpus or {}))
    for name in _captured(RDMA_NAME, remedy):
        if name not in (ports if ":" in name else devices):
            found.append(f"RDMA {'port' if ':' in name else 'device'} {name} is not this node's")
    for name in _captured(NETDEV_NAME, remedy):
        if name not in netdevs:
            found.append(f"netdev {name} is not this node's")
    for address in _captured(PCI_ADDRESS, remedy):
        if address.lower() not in pci:
            found.append(f"PCI function {address} is not this node's")
    for name in _captured(DEVICE_ARGUMENTS, remedy):
        if name not in devices and name.lower() not in pci:
            found.append(f"command argument {name} is no RDMA device or PCI function of this node")
    for name in _captured(NETDEV_ARGUMENTS, remedy):
        if name not in netdevs:
            found.append(f"command argument {name} is no netdev of this node")
    for name in _captured(PCI_ARGUMENTS, remedy):
        if name.lower() not in pci:
            found.append(f"command argument {name} is no PCI function of this node")
    for name in _captured(GPU_ARGUMENTS, remedy):
        if name not in gpus:
            found.append(f"command argument {name} is no GPU index or address of this node")
    return found


def unpasteable(findings: Iterable[Finding], inventory: Inventory) -> list[str]:
    return [f"{finding.check} {finding.subject}: {problem}\n    {finding.remedy}"
            for finding in findings if finding.remedy for problem in problems(finding.remedy, inventory)]


# -- the fixture nodes, judged once ------------------------------------------------------------------
def _selection() -> list[tuple[str, CheckOptions]]:
    """(label, options): the fixtures with a finding, their baseline pairs, the H200 capture. A fixture
    is judged with the pack INDEX.toml says auto-selection picks for it (naming it spares reading
    every bundled pack to choose; test_scenarios holds the choice itself)."""
    chosen: list[tuple[str, CheckOptions]] = []
    for name, entry in sorted(INDEX.items()):
        options = CheckOptions(snapshot=NODES / name, rules=entry["rules"], no_probe=True, deadline_s=60.0)
        if entry["expect"]["findings"]:
            chosen.append((name, options))
        if "baseline" in entry:
            chosen.append((f"{name}+baseline", replace(options, baseline=NODES / entry["baseline"])))
    if CAPTURE.is_file():
        chosen.append(("nvidia-h200-x2 capture", CheckOptions(snapshot=CAPTURE, no_probe=True, deadline_s=60.0)))
    return chosen


@pytest.fixture(scope="module")
def judged() -> dict[str, tuple[Report, Inventory]]:
    """Each selected snapshot's report and the inventory its checks judged (discover's, kept as it returns)."""
    results: dict[str, tuple[Report, Inventory]] = {}
    real_discover = run_module.discover
    seen: list[Inventory] = []

    def keep(*args: object, **kwargs: object) -> Inventory:
        inventory = real_discover(*args, **kwargs)  # type: ignore[arg-type]
        seen.append(inventory)
        return inventory

    with mock.patch.object(run_module, "discover", keep):
        for label, options in _selection():
            seen.clear()
            report = run_module.run_check(options, env={})
            assert seen, f"{label}: run_check no longer calls netdoctor.run.discover; keep its inventory another way"
            results[label] = (report, seen[0])
    return results


def test_every_fixture_remedy_names_only_this_nodes_devices(judged: dict[str, tuple[Report, Inventory]]) -> None:
    bad = [f"{label}: {line}" for label, (report, inventory) in judged.items()
           for line in unpasteable(report.findings, inventory)]
    assert not bad, "remedies that cannot be pasted:\n" + "\n".join(bad)


def test_every_check_that_gives_remedies_is_reached(judged: dict[str, tuple[Report, Inventory]]) -> None:
    """The selection is representative: every built-in check whose remedies a snapshot run can produce
    gave at least one here (the probe's two need traffic; fabric-netdevs' fixture is healthy: all
    three are built below)."""
    registry = Registry()
    registry.load_builtins()
    reached = {finding.check for report, _ in judged.values() for finding in report.findings if finding.remedy}
    built_below = {"nccl-probe", "nic-loopback", "fabric-netdevs"}
    assert set(registry.ids()) - built_below <= reached, sorted(set(registry.ids()) - built_below - reached)
    remedies = sum(1 for report, _ in judged.values() for finding in report.findings if finding.remedy)
    assert remedies >= 100, remedies     # 127 at the time of writing: the run really judged remedies


def test_the_text_report_prints_each_subjects_own_command(judged: dict[str, tuple[Report, Inventory]]) -> None:
    """The JSON carries each finding's remedy; the text report, grouping findings that differ only by
    their subject, must not turn the commands back into a glob."""
    from netdoctor.report.text import render_text

    bad = []
    for label in ("roce-h100-no-pfc", "roce-h100-ecn-off", "roce-h100-lossy-priority", "dgx-h100-fabric-manager-failed"):
        report, inventory = judged[label]
        for line in render_text(report, width=10_000).splitlines():
            if line.strip().startswith("remedy:"):
                bad += [f"{label}: {problem}\n    {line.strip()}" for problem in problems(line, inventory)]
    assert not bad, "\n".join(bad)


# -- the check can fail ------------------------------------------------------------------------------
@pytest.mark.parametrize(("remedy", "caught"), [
    ("clean it: `mlxlink -d <dev> -m` shows the readings", "<angle-bracket>"),
    ("mlnx_qos -i ens[1-8]np0 --pfc 0,0,0,1,0,0,0,0", "[1-8] range glob"),
    ("`for d in /sys/class/infiniband/mlx5_*; do cat $d/ports/1/state; done`", "* glob in a name"),
    ("`ethtool -S $DEV | grep phy`", "shell variable"),
    ("`mlxlink -d DEV -c`", "placeholder word"),
    ("`lspci -vv -s ADDRESS`", "placeholder word"),
    ("`ip link set ensX mtu 9000`", "X/N name"),
    ("echo 106 > /sys/class/infiniband/mlx5_N/tc/1/traffic_class", "X/N name"),
    ("reset the GPU when idle (`nvidia-smi -r -i N`)", "(-i N)"),
    ("`mlxlink -d mlx5_99 -m`", "mlx5_99 is not this node's"),
    ("`perfquery -x -C mlx5_0 -P 1` on mlx5_0:7", "mlx5_0:7 is not this node's"),
    ("`ethtool -S ens9f0np0 | grep phy`", "ens9f0np0 is not this node's"),
    ("`ethtool -m eth7`", "eth7 is no netdev"),
    ("`lspci -vv -s 0000:ee:00.0 | grep LnkSta`", "0000:ee:00.0 is not this node's"),
    ("`nvidia-smi -r -i 9`", "9 is no GPU index"),
    ("`dcgmi diag -r 3 -i 12`", "12 is no GPU index"),
])
def test_a_placeholder_or_a_foreign_name_is_caught(remedy: str, caught: str) -> None:
    found = problems(remedy, dgx_h100())
    assert any(caught in problem for problem in found), found


def test_concrete_remedies_of_the_factory_node_pass() -> None:
    inventory = dgx_h100()
    for remedy in ("`mlxlink -d mlx5_3 -m` shows the readings, `mlxlink -d mlx5_3 -c` the counters of mlx5_3:1",
                   "`ip link set ibp3s0 mtu 4092`; `ethtool -S ibp3s0 | grep -E 'phy|pause|prio'`",
                   "`nvidia-smi -r -i 0000:2a:00.0`, `dcgmi diag -r 3 -i 1`, `lspci -vv -s 0000:1a:00.0`",
                   "restart it (`systemctl restart nvidia-fabricmanager`); `modprobe mlx5_ib`; `nvidia-imex-ctl -N`"):
        assert problems(remedy, inventory) == []


def test_the_old_transceiver_remedy_is_caught_on_its_fixture(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole path: put 0.1's `<dev>` remedy back into the check, judge the fixture, and it is caught."""
    import netdoctor_plugins.transceiver as module

    old = ("clean the connectors and reseat the module (or the cable) at both ends; if it persists, swap it for a "
           "known-good one: `mlxlink -d <dev> -m` shows the readings, `mlxlink -d <dev> -c` the link's error counters")
    monkeypatch.setattr(module, "remedy", lambda hca, netdev: old)
    seen: list[Inventory] = []
    real_discover = run_module.discover

    def keep(*args: object, **kwargs: object) -> Inventory:
        seen.append(real_discover(*args, **kwargs))  # type: ignore[arg-type]
        return seen[-1]

    monkeypatch.setattr(run_module, "discover", keep)
    report = run_module.run_check(CheckOptions(snapshot=NODES / "dgx-h100-module-hot", no_probe=True,
                                               only=("transceiver",)), env={})
    bad = unpasteable(report.findings, seen[0])
    assert bad and all("<angle-bracket>" in line for line in bad), bad


# -- remedies no fixture reaches --------------------------------------------------------------------
def _concrete(findings: list[Finding], inventory: Inventory) -> list[Finding]:
    """The findings, after asserting that every remedy among them can be pasted (and that there is one)."""
    assert any(finding.remedy for finding in findings), findings
    assert unpasteable(findings, inventory) == []
    return findings


def test_a_roce_lag_bond_is_configured_on_its_slaves() -> None:
    inventory = dgx_h100(storage="cx7-ib", gpus=[], hcas=[roce_hca("mlx5_bond_0", "bond0", "0000:17:00.0")],
                         topology=None)
    bond = replace(roce_netdev("bond0", "mlx5_bond_0:1", pfc=(), ecn_rp={3: False}),
                   bond_slaves=("ens1f0np0", "ens1f1np1"))
    inventory.netdevs = [bond, Netdev("ens1f0np0", operstate="up"), Netdev("ens1f1np1", operstate="up")]
    inventory.sources.update(sources("ibdev2netdev", "mlnx_qos-ens1f0np0", "mlnx_qos-ens1f1np1"))
    findings = _concrete(run_check(pfc_ecn, "pfc-ecn", inventory, pack_name="roce"), inventory)
    remedies = " ".join(finding.remedy or "" for finding in findings)
    assert "mlnx_qos -i ens1f0np0 --pfc 0,0,0,1,0,0,0,0; mlnx_qos -i ens1f1np1 --pfc 0,0,0,1,0,0,0,0" in remedies
    assert "echo 1 > /sys/class/net/ens1f1np1/ecn/roce_rp/enable/3" in remedies
    assert "-i bond0" not in remedies and "/net/bond0/" not in remedies


def test_a_port_whose_netdev_is_not_known_says_so_and_names_a_gid_to_use() -> None:
    inventory = roce_node()
    for port in inventory.ports:
        port.gids = {1: Gid("RoCE v2", "fe80:0000:0000:0000:0000:00ff:fe00:0001"),
                     3: Gid("RoCE v2", "0000:0000:0000:0000:0000:ffff:0a0a:0001")}
    port = inventory.ports[0]
    port.netdev = None
    inventory.netdevs = [netdev for netdev in inventory.netdevs if netdev.rdma_port != port.name]
    inventory.nccl = nccl_settings({"NCCL_IB_GID_INDEX": "5"}, {}, "/home/alice")
    finding = only(_concrete(run_check(nccl_env, "nccl-env", inventory), inventory), "mlx5_0:1")
    assert "the netdev of mlx5_0:1 is not known: find it with `ibdev2netdev`" in (finding.remedy or "")
    assert "NCCL_IB_GID_INDEX=3 is one on mlx5_0:1 (`show_gids mlx5_0 1` lists them)" in (finding.remedy or "")


def test_a_node_without_mlxlink_gets_one_command_per_device() -> None:
    inventory = dgx_h100(storage=None)
    inventory.sources.update(sources("mlxlink-m-mlx5_0", state=SourceState.NOT_RUN))
    [module] = _concrete([finding for finding in run_check(transceiver, "transceiver", inventory, pack_name="dgx-h100")
                          if finding.remedy], inventory)
    assert "`mlxlink -d mlx5_0 -m`, `mlxlink -d mlx5_1 -m`, `mlxlink -d mlx5_2 -m` (likewise for mlx5_3, " \
           "mlx5_4, mlx5_5, mlx5_6, mlx5_7)" in (module.remedy or "")
    [physical] = _concrete([finding for finding in run_check(phy, "phy", inventory, pack_name="dgx-h100")
                            if finding.remedy], inventory)
    assert "`mlxlink -d mlx5_0 -c`" in (physical.remedy or "") and "DEV" not in (physical.remedy or "")
    roce = roce_node()
    [module] = _concrete([finding for finding in run_check(transceiver, "transceiver", roce, pack_name="roce")
                          if finding.remedy], roce)
    assert "`ethtool -m ens1f0np0`, `ethtool -m ens2f0np0`" in (module.remedy or "")
    [physical] = _concrete([finding for finding in run_check(phy, "phy", roce, pack_name="roce") if finding.remedy],
                           roce)
    assert "`ethtool -S ens1f0np0`" in (physical.remedy or "")


def test_the_probe_names_the_gpu_and_the_time_to_give() -> None:
    inventory = Inventory(host="n", captured_at=CAPTURED_AT, gpus=h100_gpus(), sources=sources("nvml"))
    copies = [{"kind": "copy", "direction": "host-to-device", "gpus": [index], "bytes": 1 << 26,
               "gbps": 12.0 if index == 5 else 55.0} for index in range(8)]
    pairs = [{"kind": "pair", "gpus": [index, (index + 1) % 8], "bytes": 1 << 26,
              "busbw_gbps": 90.0 if 5 in (index, (index + 1) % 8) else 280.0, "verified": True} for index in range(8)]
    probe = ProbeResult.from_json({"status": "ok", "engine": "nccl", "gpus": list(range(8)), "sizes": [
        {"bytes": 1 << 28, "time_us": 5000.0, "algbw_gbps": 200.0, "busbw_gbps": 200.0, "verified": True}],
        "localisation": copies + pairs})
    findings = _concrete(list(nccl_probe(CheckContext("nccl-probe", inventory, pack(), probe=probe))), inventory)
    remedies = " ".join(finding.remedy or "" for finding in findings if finding.subject == "GPU5")
    assert "`nvidia-smi -q -d PCIE -i 5`" in remedies and "`nvidia-smi nvlink -s -i 5`" in remedies
    short = ProbeResult.from_json({"status": "error", "reason_code": "budget-too-short", "budget_s": 1.27,
                                   "min_budget_s": 3.0, "reason": "the probe needs at least 3 s; it got 1.3 s"})
    [finding] = _concrete(list(nccl_probe(CheckContext("nccl-probe", inventory, pack(), probe=short))), inventory)
    assert finding.remedy == ("give the probe more time: `netdoctor check --deadline 6` (the probe gets about half) "
                              "or `netdoctor probe --budget 3`")


def test_the_nic_loopback_names_the_device_port_and_gpu() -> None:
    inventory = dgx_h100()
    rails = [Rail(f"mlx5_{index}:1", f"mlx5_{index}", 1, index, "PIX in nvidia-smi topo -m", 400.0)
             for index in range(8)]
    results = (*(RailResult(rail.port, rail.gpu, "nccl", "ok", bandwidth_gbps=380.0 if rail.gpu != 2 else 120.0,
                            transport="NET/IB/GDRDMA", gdr=True) for rail in rails if rail.gpu != 3),
               RailResult("mlx5_3:1", 3, "nccl", "timeout", reason="killed at the deadline"))
    context = CheckContext("nic-loopback", inventory, pack("dgx-h100"),
                           loopback=LoopbackResult("nccl", results, requested=tuple(rails)))
    findings = _concrete([finding for finding in nic_loopback(context) if finding.status is not Status.PASS], inventory)
    slow = only(findings, "mlx5_2:1")
    assert "`ib_write_bw -d mlx5_2 -i 1 --use_cuda=2 &` then `ib_write_bw -d mlx5_2 -i 1 --use_cuda=2 localhost`" \
        in (slow.remedy or "")
    assert "`ibstat mlx5_3 1`" in (only(findings, "mlx5_3:1").remedy or "")


def test_a_gcp_gpu_nic_is_named_in_its_commands() -> None:
    with open_source(NODES / "gcp-a3-high") as source:
        inventory = copy.deepcopy(discover(source, deadline=time.monotonic() + 60))
    inventory.netdevs = [replace(netdev, speed_mbps=100000, mtu=1460) if netdev.name == "eth1" else netdev
                         for netdev in inventory.netdevs]
    finding = only(_concrete(run_check(fabric_netdevs, "fabric-netdevs", inventory, pack_name="gcp-a3-high"),
                             inventory), "eth1")
    assert "`ethtool -i eth1`" in (finding.remedy or "")
    inventory.netdevs = [replace(netdev, speed_mbps=200000) if netdev.name == "eth1" else netdev
                         for netdev in inventory.netdevs]
    finding = only(run_check(fabric_netdevs, "fabric-netdevs", inventory, pack_name="gcp-a3-high"), "eth1")
    assert "`ip link set eth1 mtu 8244`" in (finding.remedy or "") and not problems(finding.remedy or "", inventory)
    inventory.nccl = nccl_settings({"NCCL_GPUDIRECTTCPX_SOCKET_IFNAME": "eth1,eth9"}, {}, "/home/alice")
    finding = only(run_check(nccl_env, "nccl-env", inventory, pack_name="gcp-a3-high"),
                   "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME")
    assert "write NCCL_GPUDIRECTTCPX_SOCKET_IFNAME=eth1,eth2,eth3,eth4" in (finding.remedy or "")
    assert not problems(finding.remedy or "", inventory)
