"""Hand-built inventories for check unit tests, shaped like real nodes.

`dgx_h100()` is a DGX H100: 8 GPUs, 8 ConnectX-7 (MT4129) NDR InfiniBand rails mlx5_0..7
(4X, 400 Gb/s, LID 0x11.., SM LID 0x1, P_Key 0xffff, IB MTU 4096, IPoIB ibp*s0 at 4092)
and a BlueField-3 (MT41692) `mlx5_bond_0` Ethernet storage port at 200 Gb/s (2X NDR).
`roce_node()` has 8 ConnectX-7 400GbE RoCE ports with netdevs at MTU 9000.
`run_check()` runs one check function the way the engine does: with the real bundled pack.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from netdoctor.checks.api import CheckContext, CounterHistory
from netdoctor.checks.rules import RulePack, load_rules
from netdoctor.inventory.model import (
    Gpu,
    Hca,
    Inventory,
    LinkLayer,
    LinkRate,
    Netdev,
    PhysState,
    Port,
    PortState,
    SourceState,
    SourceStatus,
)
from netdoctor.report.model import Finding, Status

CAPTURED_AT = "2026-11-21T22:40:00Z"
BOOT_ID = "5f2c1e3a-8a0b-4a8e-9d3c-2b7f4f0e9a11"

NDR = LinkRate(400, 4, "NDR", 106.25)
HDR = LinkRate(200, 4, "HDR", 53.125)

# A clean port's counters as the mlx5 sysfs counters/ directory gives them.
CLEAN_COUNTERS: dict[str, int | None] = {
    "symbol_error": 0,
    "link_error_recovery": 0,
    "link_downed": 0,
    "port_rcv_errors": 0,
    "port_rcv_remote_physical_errors": 0,
    "port_rcv_switch_relay_errors": 0,
    "port_xmit_discards": 0,
    "port_xmit_constraint_errors": 0,
    "port_rcv_constraint_errors": 0,
    "local_link_integrity_errors": 0,
    "excessive_buffer_overrun_errors": 0,
    "VL15_dropped": 0,
    "port_xmit_data": 93482015839,
    "port_rcv_data": 93467110426,
    "port_xmit_wait": 1204,
}
CLEAN_HW_COUNTERS: dict[str, int] = {
    "out_of_sequence": 0,
    "packet_seq_err": 0,
    "local_ack_timeout_err": 0,
    "rnr_nak_retry_err": 0,
    "out_of_buffer": 0,
    "roce_adp_retrans": 3,
}


def sources(*names: str, state: SourceState = SourceState.OK, detail: str = "") -> dict[str, SourceStatus]:
    return {name: SourceStatus(name, state, detail) for name in names}


def ib_port(hca: str, number: int = 1, *, lid: int | None = 0x11, netdev: str | None = None, **changes: Any) -> Port:
    values: dict[str, Any] = dict(
        state=PortState.ACTIVE, phys_state=PhysState.LINK_UP, rate=NDR, link_layer=LinkLayer.INFINIBAND,
        lid=lid, sm_lid=0x1, lmc=0, active_mtu=4096, max_mtu=4096, netdev=netdev, pkeys=("0xffff",),
        counters=dict(CLEAN_COUNTERS), counters_source="sysfs", hw_counters=dict(CLEAN_HW_COUNTERS),
        sources=("sysfs", "ibstat"),
    )
    values.update(changes)
    return Port(hca, number, **values)


def ib_hca(index: int, **port_changes: Any) -> Hca:
    name = f"mlx5_{index}"
    port = ib_port(name, lid=0x11 + index, netdev=f"ibp{index}s0", **port_changes)
    return Hca(name, ca_type="MT4129", model="ConnectX-7", firmware="28.39.1002",
               pci_address=f"0000:{0x18 + 0x10 * index:02x}:00.0", numa_node=0 if index < 4 else 1,
               ports={1: port}, sources=("sysfs", "ibstat"))


def storage_hca() -> Hca:
    port = Port("mlx5_bond_0", 1, PortState.ACTIVE, PhysState.LINK_UP, LinkRate(200, 2, "NDR"), LinkLayer.ETHERNET,
                active_mtu=4096, max_mtu=4096, netdev="bond0", pkeys=("0xffff",),
                counters=dict(CLEAN_COUNTERS), counters_source="sysfs", hw_counters=dict(CLEAN_HW_COUNTERS),
                sources=("sysfs",))
    return Hca("mlx5_bond_0", ca_type="MT41692", model="BlueField-3", pci_address="0000:c0:00.0", numa_node=1,
               ports={1: port}, sources=("sysfs",))


def h100_gpus(count: int = 8) -> list[Gpu]:
    return [Gpu(index, name="NVIDIA H100 80GB HBM3", uuid=f"GPU-{index:08x}",
                pci_address=f"0000:{0x19 + 0x10 * index:02x}:00.0", numa_node=0 if index < 4 else 1)
            for index in range(count)]


def dgx_h100(*, storage: bool = True, host: str = "node017") -> Inventory:
    hcas = [ib_hca(index) for index in range(8)]
    netdevs = [Netdev(f"ibp{index}s0", mtu=4092, operstate="up", arp_type=32, rdma_port=f"mlx5_{index}:1")
               for index in range(8)]
    if storage:
        hcas.append(storage_hca())
        netdevs.append(Netdev("bond0", mtu=9000, operstate="up", arp_type=1, rdma_port="mlx5_bond_0:1"))
    return Inventory(host=host, captured_at=CAPTURED_AT, boot_id=BOOT_ID, gpus=h100_gpus(), hcas=hcas,
                     netdevs=netdevs, sources=sources("sysfs", "nvml", "ibstat", "ibv_devinfo-v", "ibdev2netdev"))


def roce_node(*, mtu: int = 9000) -> Inventory:
    hcas = []
    netdevs = []
    for index in range(8):
        name = f"mlx5_{index}"
        netdev = f"ens{index + 1}f0np0"
        port = Port(name, 1, PortState.ACTIVE, PhysState.LINK_UP, LinkRate(400, 4), LinkLayer.ETHERNET,
                    active_mtu=4096, max_mtu=4096, netdev=netdev, pkeys=("0xffff",),
                    counters=dict(CLEAN_COUNTERS), counters_source="sysfs", hw_counters=dict(CLEAN_HW_COUNTERS),
                    sources=("sysfs",))
        hcas.append(Hca(name, ca_type="MT4129", model="ConnectX-7", ports={1: port}, sources=("sysfs",)))
        netdevs.append(Netdev(netdev, mtu=mtu, operstate="up", arp_type=1, rdma_port=f"{name}:1"))
    return Inventory(host="roce03", captured_at=CAPTURED_AT, boot_id=BOOT_ID, gpus=h100_gpus(), hcas=hcas,
                     netdevs=netdevs, sources=sources("sysfs", "nvml", "ibstat", "ibv_devinfo-v", "ibdev2netdev"))


def port_of(inventory: Inventory, name: str) -> Port:
    port = inventory.port(name)
    assert port is not None, f"no port {name} in the test inventory"
    return port


def history_of(inventory: Inventory, *, elapsed_s: float = 3600.0,
               changes: dict[str, dict[str, int | None]] | None = None) -> CounterHistory:
    """A previous reading equal to this inventory's counters, `elapsed_s` earlier, minus `changes`."""
    ports: dict[str, dict[str, int | None]] = {}
    for port in inventory.ports:
        values: dict[str, int | None] = dict(port.counters)
        values.update({f"hw_counters/{name}": value for name, value in port.hw_counters.items()})
        values.update((changes or {}).get(port.name, {}))
        ports[port.name] = values
    return CounterHistory(taken_at="2026-11-21T21:40:00Z", elapsed_s=elapsed_s, ports=ports)


_PACKS: dict[str, RulePack] = {}


def pack(name: str = "default") -> RulePack:
    """A bundled pack (no site overrides), loaded once per test session."""
    if name not in _PACKS:
        _PACKS[name] = load_rules(name, env={})
    return _PACKS[name]


def run_check(function: Callable[[CheckContext], Iterable[Finding]], check_id: str, inventory: Inventory, *,
              pack_name: str = "default", history: CounterHistory | None = None,
              overrides: dict[str, Any] | None = None, rule_pack: RulePack | None = None) -> list[Finding]:
    """Run a check function like the engine: the pack's section, optional per-test overrides."""
    chosen = rule_pack if rule_pack is not None else pack(pack_name)
    if overrides:
        chosen = copy.deepcopy(chosen)
        chosen.data[check_id] = {**chosen.data.get(check_id, {}), **overrides}
    context = CheckContext(check_id, inventory, rules=chosen.section(check_id), history=history)
    return list(function(context))


def site_pack(tmp_path: Path, base: str, text: str) -> RulePack:
    """A bundled pack with a site override file written from `text`."""
    site = tmp_path / "site-rules.toml"
    site.write_text(text)
    return load_rules(base, site_path=site, env={})


def by_subject(findings: list[Finding]) -> dict[str, list[Finding]]:
    grouped: dict[str, list[Finding]] = {}
    for finding in findings:
        grouped.setdefault(finding.subject, []).append(finding)
    return grouped


def statuses(findings: list[Finding], subject: str) -> list[Status]:
    return [finding.status for finding in findings if finding.subject == subject]


def only(findings: list[Finding], subject: str, status: Status | None = None) -> Finding:
    """The single finding of `subject` (of `status`, when given)."""
    hits = [finding for finding in findings
            if finding.subject == subject and (status is None or finding.status is status)]
    assert len(hits) == 1, f"expected one finding for {subject} ({status}), got {hits}"
    return hits[0]
