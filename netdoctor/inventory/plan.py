"""The discovery plan: which rows of the source table this run collects, and on which devices.

`needs` None collects everything (`netdoctor discover`, `capture`, a full `check`);
otherwise only the rows serving one of those needs (the union of the selected checks'
needs): `check --only mtu` runs no mlnx_qos. A row left out is recorded
as a NOT_RUN source with the reason, so the needs gate can still say why a fact is missing.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping

from netdoctor.host.sources import SOURCES, SOURCES_BY_NAME, Scope, Source
from netdoctor.host.types import CommandSpec
from netdoctor.inventory.hardware import is_efa
from netdoctor.inventory.model import Inventory, LinkLayer
from netdoctor.records import record

# What judging a need also reads. The needs gate judges ib/roce/counters/qos through rdma;
# the rule pack's port classes place RDMA ports by their GPU proximity (`near_gpu`: the
# topo matrix, else GPU NUMA nodes); pcie judges GPUs and NICs; the probe is placed on
# GPUs and NICs by the topology.
IMPLIED_NEEDS: dict[str, frozenset[str]] = {
    "ib": frozenset({"rdma"}),
    "roce": frozenset({"rdma"}),
    "counters": frozenset({"rdma"}),
    "qos": frozenset({"roce"}),
    "rdma": frozenset({"gpus", "topology"}),
    "topology": frozenset({"gpus"}),
    "pcie": frozenset({"gpus", "rdma", "pcie-tree"}),   # with the uplinks of the switches above them
    "probe": frozenset({"gpus", "topology", "rdma"}),
    "nvlink": frozenset({"gpus"}),
    "fabric": frozenset({"gpus"}),
    "kernel-log": frozenset({"gpus", "rdma"}),   # to name the GPU or port an event is about
    "pcie-tree": frozenset({"gpus", "rdma"}),    # the tree is read above GPUs and NICs
    "transceiver": frozenset({"rdma"}),
    "phy": frozenset({"rdma"}),
    "nccl-env": frozenset({"rdma", "gpus", "pcie-tree"}),
    "loopback": frozenset({"gpus", "topology", "rdma", "pcie-tree"}),   # rails, their GPUs, passive causes
    "neighbors": frozenset({"rdma"}),            # a neighbour is found per RDMA port (its GUIDs, LIDs, netdev)
    "netdevs": frozenset({"gpus", "pcie-tree"}),   # a GPU NIC is a netdev on a GPU's PCIe switch
    "efa": frozenset({"rdma"}),                    # fi_info and NCCL's settings (the nccl-env row), for EFA devices
    "placement": frozenset({"gpus", "rdma", "topology", "pcie-tree"}),   # EFA sits beside its GPU only in the tree
}
# Needs that only the report's `versions` and `neighbors` read: no check judges them, so a
# source serving only these that hangs is not reported as a check that judged without it.
REPORT_ONLY_NEEDS = frozenset({"versions", "neighbors"})
FABRIC_SCAN_NOT_ASKED = "fabric scan not asked for (--fabric-scan)"
NOT_NEEDED = "not needed by the selected checks"
LIVE_ONLY = "collected only on a live node"


@record(frozen=True)
class Job:
    """One command of the plan: the row it comes from and the fields it was expanded with."""

    row: Source
    fields: Mapping[str, str]
    spec: CommandSpec


@functools.cache
def _templates() -> tuple[tuple[Source, re.Pattern[str]], ...]:
    return tuple((row, re.compile(re.sub(r"\\\{\w+\\\}", ".+", re.escape(row.name))))
                 for row in SOURCES if "{" in row.name)


def row_named(name: str) -> Source | None:
    """The row a source's name comes from: `perfquery-x-mlx5_0-1` -> `perfquery-x-{dev}-{port}`."""
    row = SOURCES_BY_NAME.get(name)
    if row is not None:
        return row
    return next((row for row, pattern in _templates() if pattern.fullmatch(name)), None)


def report_only(name: str) -> bool:
    """Does the source `name` serve only the report's versions and neighbours (no check)?"""
    row = row_named(name)
    return row is not None and bool(row.needs) and row.needs <= REPORT_ONLY_NEEDS


def with_implied(needs: frozenset[str]) -> frozenset[str]:
    """`needs` and every need their judgement reads, transitively."""
    closed = set(needs)
    pending = list(needs)
    while pending:
        for implied in IMPLIED_NEEDS.get(pending.pop(), frozenset()) - closed:
            closed.add(implied)
            pending.append(implied)
    return frozenset(closed)


@record(frozen=True)
class Plan:
    """`needs` None: everything. Build it with `Plan.of` so that implied needs are added."""

    needs: frozenset[str] | None
    fabric_scan: bool
    is_snapshot: bool

    @classmethod
    def of(cls, needs: frozenset[str] | None, *, fabric_scan: bool, is_snapshot: bool) -> Plan:
        return cls(None if needs is None else with_implied(needs), fabric_scan, is_snapshot)

    def why_not(self, row: Source) -> str | None:
        """None when `row` is collected, else why not."""
        if not row.serves(self.needs):
            return NOT_NEEDED
        if row.fabric and not self.fabric_scan:
            return FABRIC_SCAN_NOT_ASKED
        if self.is_snapshot and not row.in_snapshot:
            return LIVE_ONLY
        return None

    def serves(self, need: str) -> bool:
        """Is `need` (or everything) collected by this plan?"""
        return self.needs is None or need in self.needs

    def wants(self, name: str) -> bool:
        return self.why_not(SOURCES_BY_NAME[name]) is None

    def left_out(self) -> Iterator[tuple[str, str]]:
        """(row name, reason) for each node-wide row this plan does not collect."""
        for row in SOURCES:
            reason = self.why_not(row)
            if reason is not None and row.scope is Scope.NODE:
                yield row.name, reason

    def commands(self, inventory: Inventory, *scopes: Scope) -> list[Job]:
        """The commands of the collected rows of these scopes, expanded over the devices found
        so far, in the table's order of trust (mlxlink's reading of a port before ethtool's)."""
        jobs = []
        for row in SOURCES:
            if row.is_command and row.scope in scopes and self.why_not(row) is None:
                jobs.extend(Job(row, fields, row.expand(**fields)) for fields in targets(row.scope, inventory))
        return sorted(jobs, key=lambda job: (SOURCES.index(job.row), job.spec.name))


def targets(scope: Scope, inventory: Inventory) -> list[dict[str, str]]:
    """The template fields a row of `scope` is expanded with, from what is known so far."""
    if scope is Scope.NODE:
        return [{}]
    if scope is Scope.IB_PORT:
        return [{"dev": port.hca, "port": str(port.number)} for port in inventory.ports
                if port.link_layer is LinkLayer.INFINIBAND]
    if scope is Scope.RDMA_DEVICE:
        return [{"dev": hca.name} for hca in inventory.hcas
                if hca.pci_address and not hca.physical_function and not is_efa(hca)]
    if scope is Scope.EFA:
        return [{}] if any(is_efa(hca) for hca in inventory.hcas) else []
    return [{"netdev": name} for name in sorted(_roce_netdevs(inventory))]


def _roce_netdevs(inventory: Inventory) -> set[str]:
    names = {port.netdev for port in inventory.ports if port.link_layer is LinkLayer.ETHERNET and port.netdev}
    # mlnx_qos speaks to the slaves of a RoCE LAG bond, not to the bond.
    for bond in [netdev for netdev in inventory.netdevs if netdev.name in names and netdev.bond_slaves]:
        names.discard(bond.name)
        names.update(bond.bond_slaves)
    # RoCE netdevs named by sysfs GID tables; fall back to netdevs of RoCE PCI functions.
    functions = {hca.pci_address for hca in inventory.hcas if any(p.link_layer is LinkLayer.ETHERNET for p in hca.ports.values())}
    names.update(netdev.name for netdev in inventory.netdevs if netdev.pci_address in functions and not netdev.is_ipoib)
    return names
