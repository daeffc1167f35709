"""mtu: IB active MTU of each IB port, and the MTU of RoCE and IPoIB netdevs.

Reads Port.active_mtu / max_mtu (ibv_devinfo -v), Port.netdev (ibdev2netdev, sysfs),
Netdev.mtu / arp_type (sysfs /sys/class/net) and the pack's port classes. A too-small MTU
does not break jobs, it slows them: a 2048-byte IB MTU or a 1500-byte RoCE netdev (which
caps the RoCE MTU at 1024) costs bandwidth on every message. Ports/netdevs of one class
whose MTUs differ are flagged too: the rails of one job then behave differently.
Only RoCE compute rails get the RoCE MTU judgement: Ethernet ports of a storage/management/
unused class are skipped (without port classes every RDMA Ethernet port is taken as RoCE).
SR-IOV VFs follow their physical function and are skipped.
See docs/checks.md (`mtu`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from netdoctor.checks import CheckContext, Finding, Status, check
from netdoctor.checks.api import majority
from netdoctor.inventory.hardware import is_efa
from netdoctor.inventory.model import Hca, LinkLayer, Netdev, Port
from netdoctor.inventory.queries import unavailable_reason, virtual_function_note
from netdoctor.packs import PortClass
from netdoctor.records import record

NETDEV_SOURCES = ("sysfs", "ibdev2netdev")


@record
class Judged:
    """One subject's MTU finding, and the group it must agree with (kind, port class)."""

    finding: Finding
    group: tuple[str, str] | None = None
    value: int | None = None


def _class_name(port_class: PortClass | None) -> str:
    return port_class.name if port_class else "unclassed"


def _ib_port(ctx: CheckContext, hca: Hca, port: Port) -> Finding:
    expected = int(ctx.rule("ib_mtu"))
    evidence = {"active_mtu": port.active_mtu, "max_mtu": port.max_mtu, "expected_mtu": expected}
    if port.active_mtu is None:
        return ctx.unknown(port.name, "IB active MTU unknown: " + unavailable_reason(ctx.inventory, "ibv_devinfo-v"),
                           evidence=evidence)
    if port.active_mtu < expected:
        if port.max_mtu is not None and port.max_mtu < expected:
            remedy = (f"the HCA port's max MTU is {port.max_mtu}: check its firmware configuration "
                      f"(`mlxconfig -d {hca.name} q`) and the port's VL capability")
        else:
            remedy = ("the subnet manager or switch caps the MTU: set the partition MTU to 4096 (mtu=5 in "
                      "opensm partitions.conf, or the UFM PKey MTU) and check the switch port's MTU cap")
        return ctx.graded(ctx.rule("ib_mtu_severity"), port.name,
                          f"IB active MTU is {port.active_mtu}, expected {expected}", evidence=evidence,
                          remedy=remedy, rule="ib_mtu")
    return ctx.passed(port.name, f"IB active MTU {port.active_mtu}", evidence=evidence)


def _netdev(ctx: CheckContext, netdev: Netdev, port: Port | None, kind: str) -> Finding:
    roce = kind == "RoCE"
    key = "roce" if roce else "ipoib"
    minimum = int(ctx.rule(f"{key}_min_mtu"))
    evidence = {"mtu": netdev.mtu, "minimum_mtu": minimum, "kind": kind,
                "rdma_port": port.name if port else netdev.rdma_port}
    if netdev.mtu is None:
        return ctx.unknown(netdev.name, f"{kind} netdev MTU unknown: " + unavailable_reason(ctx.inventory, "sysfs"),
                           evidence=evidence)
    if netdev.mtu < minimum:
        if roce:
            summary = (f"RoCE netdev MTU is {netdev.mtu}, below {minimum}: the RoCE MTU drops below 4096 "
                       "(1500 gives 1024)")
            remedy = (f"set the MTU to 9000 (`ip link set {netdev.name} mtu 9000` and in the network config), "
                      "matching the switch ports")
        else:
            summary = f"IPoIB netdev MTU is {netdev.mtu}, below {minimum}"
            remedy = ("datagram mode allows IB MTU - 4 (4092 on a 4K IB MTU, if the SM's broadcast group is 4K); "
                      f"connected mode up to 65520 (`cat /sys/class/net/{netdev.name}/mode` shows the mode): "
                      f"`ip link set {netdev.name} mtu 4092`, and set it in the interface config")
        return ctx.graded(ctx.rule(f"{key}_mtu_severity"), netdev.name, summary, evidence=evidence,
                          remedy=remedy, rule=f"{key}_mtu")
    return ctx.passed(netdev.name, f"{kind} netdev MTU {netdev.mtu}", evidence=evidence)


def _judge_all(ctx: CheckContext) -> list[Judged]:
    judged: list[Judged] = []
    seen_netdevs: set[str] = set()
    port_classes: dict[str, tuple[Hca, Port, PortClass | None]] = {}
    for hca, port, port_class in ctx.pack.classified_ports(ctx.inventory):
        port_classes[port.name] = (hca, port, port_class)
        group_class = _class_name(port_class)
        through_pf = virtual_function_note(ctx.inventory, hca)
        if through_pf is not None:
            if port.netdev:
                seen_netdevs.add(port.netdev)
            judged.append(Judged(ctx.skip(port.name, through_pf,
                                          evidence={"physical_function": hca.physical_function})))
            continue
        if port_class is not None and port_class.role == "unused":
            judged.append(Judged(ctx.skip(port.name, f"port class '{port_class.name}' is unused")))
            continue
        if is_efa(hca):
            judged.append(Judged(ctx.skip(port.name, "EFA: no IB or RoCE MTU to set (the device's MTU is its own; "
                                                     "SRD segments for it)",
                                          evidence={"active_mtu": port.active_mtu})))
            continue
        if port.link_layer is LinkLayer.INFINIBAND:
            if port.state is None:
                judged.append(Judged(ctx.unknown(port.name, "port state unknown, so its MTU cannot be judged: "
                                                 + unavailable_reason(ctx.inventory, "sysfs", "ibstat"))))
            elif not port.is_active:
                judged.append(Judged(ctx.skip(port.name, "port not active; see port-state")))
            else:
                finding = _ib_port(ctx, hca, port)
                judged.append(Judged(finding, ("IB active MTU", group_class), port.active_mtu))
        elif port.link_layer is LinkLayer.ETHERNET and port_class is not None and port_class.role != "compute":
            if port.netdev:
                seen_netdevs.add(port.netdev)
            judged.append(Judged(ctx.skip(
                port.netdev or port.name,
                f"{port.name}: port class '{port_class.name}' is not a RoCE compute rail (role {port_class.role}); "
                "RoCE MTU not judged",
                evidence={"rdma_port": port.name, "port_class": port_class.name, "role": port_class.role})))
        elif port.link_layer is LinkLayer.ETHERNET:
            netdev = ctx.inventory.netdev(port.netdev) if port.netdev else None
            if netdev is None:
                what = f"netdev {port.netdev} not found" if port.netdev else "no netdev known for this RoCE port"
                judged.append(Judged(ctx.unknown(port.name, f"{what}: "
                                                 + unavailable_reason(ctx.inventory, *NETDEV_SOURCES))))
                continue
            seen_netdevs.add(netdev.name)
            judged.append(Judged(_netdev(ctx, netdev, port, "RoCE"), ("RoCE netdev MTU", group_class), netdev.mtu))
        else:
            judged.append(Judged(ctx.unknown(port.name, "link layer unknown: "
                                             + unavailable_reason(ctx.inventory, "sysfs", "ibstat"))))

    # IPoIB interfaces: by ARP type 32, or named as the netdev of an IB port.
    ipoib_ports = {port.netdev: port for _, port, _ in port_classes.values()
                   if port.link_layer is LinkLayer.INFINIBAND and port.netdev}
    for netdev in ctx.inventory.netdevs:
        if netdev.name in seen_netdevs or not (netdev.is_ipoib or netdev.name in ipoib_ports):
            continue
        port = ipoib_ports.get(netdev.name)
        if port is None and netdev.rdma_port:
            port = ctx.inventory.port(netdev.rdma_port)
        port_class = port_classes[port.name][2] if port is not None and port.name in port_classes else None
        if port_class is not None and port_class.role == "unused":
            judged.append(Judged(ctx.skip(netdev.name, f"IPoIB netdev of an unused port ({port_class.name})")))
            continue
        judged.append(Judged(_netdev(ctx, netdev, port, "IPoIB"), ("IPoIB netdev MTU", _class_name(port_class)),
                             netdev.mtu))
    return judged


def _consistency(ctx: CheckContext, judged: list[Judged]) -> None:
    """Within one (kind, port class), subjects whose MTU differs from the majority are warned."""
    groups: dict[tuple[str, str], list[Judged]] = {}
    for item in judged:
        if item.group is not None and item.value is not None and item.finding.status is Status.PASS:
            groups.setdefault(item.group, []).append(item)
    for (kind, class_name), members in groups.items():
        counts = Counter(item.value for item in members)
        if len(counts) < 2:
            continue
        norm = majority(counts)
        for item in members:
            if item.value == norm:
                continue
            old = item.finding
            item.finding = ctx.graded(
                ctx.rule("consistent_mtu_severity"), old.subject,
                f"{kind} {item.value} differs from the {norm} of the other {counts[norm]} "
                f"of port class '{class_name}'",
                evidence={**old.evidence, "majority_mtu": norm, "mtus": {str(value): count for value, count
                                                                             in sorted(counts.items())}},
                remedy=_consistent_remedy(kind, old.subject, norm, class_name),
                rule="consistent_mtu")


def _consistent_remedy(kind: str, subject: str, norm: object, class_name: str) -> str:
    """Give the odd one the MTU of the others of its class (netdevs by `ip link`, IB ports through the SM)."""
    if kind == "IB active MTU":
        return (f"give {subject} the IB MTU {norm} of the other ports of port class '{class_name}' (the subnet "
                "manager's partition MTU, and the switch port's MTU cap)")
    return (f"`ip link set {subject} mtu {norm}` (and in the network config), the MTU of the others of port class "
            f"'{class_name}'; the switch ports too")


@check("mtu", "IB active MTU of each IB port, and the MTU of RoCE and IPoIB netdevs", needs=("rdma",), order=50)
def mtu(ctx: CheckContext) -> Iterator[Finding]:
    judged = _judge_all(ctx)
    _consistency(ctx, judged)
    for item in judged:
        yield item.finding
