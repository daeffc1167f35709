"""link-speed: each ACTIVE RDMA port runs at the rate and width it should.

The expectation, in order: the rule pack's port class (`expected_rate_gbps`,
`expected_width`); else what most active ports of the same HCA type (ca_type) and link
layer on this node run at; and independently iblinkinfo's "Could be" hint, where the
fabric itself says the link could run faster. A down port's rate is a placeholder
(ibstat shows `Rate: 40` on a Disabled 400G port), so only ACTIVE ports are judged.
See docs/checks.md (`link-speed`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from netdoctor.checks import CheckContext, Finding, check
from netdoctor.checks.api import majority
from netdoctor.inventory.hardware import is_efa
from netdoctor.inventory.model import Hca, LinkLayer, LinkRate, Port
from netdoctor.inventory.queries import unavailable_reason, virtual_function_note
from netdoctor.packs import PortClass
from netdoctor.records import record

RATE_SOURCES = ("sysfs", "ibstat", "ibv_devinfo-v")


def width_remedy(hca: Hca) -> str:
    return ("a lane is down: reseat or replace the cable/transceiver, then check the switch port "
            f"(`mlxlink -d {hca.name} -m` shows per-lane state and BER)")


def speed_remedy(hca: Hca) -> str:
    return ("the link negotiated a lower speed: check that cable and transceiver are rated for the "
            f"expected speed, and the switch port's speed settings (`mlxlink -d {hca.name}`)")


@record(frozen=True)
class Expectation:
    gbps: float | None
    width: int | None
    basis: str


# Nominal IB data rate per lane -> speed name, to say "400 Gb/s (4X NDR)" for an expectation.
IB_SPEED_BY_LANE_GBPS = {2.5: "SDR", 5.0: "DDR", 10.0: "QDR", 14.0: "FDR", 25.0: "EDR", 50.0: "HDR",
                         100.0: "NDR", 200.0: "XDR"}


def _describe(gbps: float | None, width: int | None, link_layer: LinkLayer | None) -> str:
    speed = None
    if link_layer is LinkLayer.INFINIBAND and gbps and width:
        speed = IB_SPEED_BY_LANE_GBPS.get(round(gbps / width, 1))
    return LinkRate(gbps, width, speed).describe()




def _expectation(ctx: CheckContext, hca: Hca, port: Port, port_class: PortClass | None,
                 peers: list[tuple[Hca, Port, PortClass | None]]) -> Expectation | None:
    gbps = port_class.expected_rate_gbps if port_class else None
    width = port_class.expected_width if port_class else None
    bases = []
    if gbps is not None or width is not None:
        bases.append(f"port class '{port_class.name}'" if port_class else "")
    if (gbps is None or width is None) and ctx.rule("compare_with_peers") and hca.ca_type:
        # Only ports of the same class are peers: a storage port at NDR200 on the same
        # ConnectX-7 type as the NDR rails is not a degraded rail.
        same = [other for other_hca, other, other_class in peers
                if other_hca.ca_type == hca.ca_type and other.link_layer == port.link_layer
                and other_class == port_class and other.rate is not None]
        if len(same) >= 2:
            peer_gbps = majority(Counter(other.rate.gbps for other in same if other.rate and other.rate.gbps is not None))
            peer_width = majority(Counter(other.rate.width for other in same if other.rate and other.rate.width))
            used = []
            if gbps is None and peer_gbps is not None:
                gbps = float(peer_gbps)
                used.append("rate")
            if width is None and peer_width is not None:
                width = int(peer_width)
                used.append("width")
            if used:
                kind = f" '{port_class.name}'" if port_class else ""
                bases.append(f"the {' and '.join(used)} most of the {len(same)} active {hca.ca_type}{kind} ports "
                             "run at")
    if gbps is None and width is None:
        return None
    return Expectation(gbps, width, " and ".join(base for base in bases if base))


def _could_be_problem(hca: Hca, port: Port) -> tuple[str, str] | None:
    """iblinkinfo's hint that this link could run wider or faster than it does: (text, remedy)."""
    hint, rate = port.could_be, port.rate
    if hint is None or rate is None:
        return None
    wider = bool(hint.width and rate.width and hint.width > rate.width)
    faster = bool((hint.lane_gbps and rate.lane_gbps and hint.lane_gbps > rate.lane_gbps)
                  or (hint.gbps and rate.gbps and hint.gbps > rate.gbps))
    if not (wider or faster):
        return None
    if hint.gbps is not None:
        could = hint.describe()       # "400 Gb/s (4X NDR)"
    else:
        could = f"{hint.width}X" if wider else f"{hint.lane_gbps:g} Gb/s per lane"
    return f"iblinkinfo says the link could run at {could}", width_remedy(hca) if wider else speed_remedy(hca)


def _judge(ctx: CheckContext, hca: Hca, port: Port, port_class: PortClass | None,
           peers: list[tuple[Hca, Port, PortClass | None]]) -> Finding:
    rate = port.rate
    assert rate is not None and rate.gbps is not None
    expected = _expectation(ctx, hca, port, port_class, peers)
    evidence: dict[str, object] = {
        "rate_gbps": rate.gbps, "width": rate.width, "speed": rate.speed, "lane_gbps": rate.lane_gbps,
        **ctx.pack.class_evidence(ctx.inventory, hca, port_class),
    }
    slower: list[str] = []
    faster: list[str] = []
    remedies: list[str] = []
    if expected is not None:
        evidence.update(expected_gbps=expected.gbps, expected_width=expected.width, basis=expected.basis)
        if expected.gbps is not None and rate.gbps < expected.gbps:
            slower.append("rate")
            remedies.append(speed_remedy(hca))
        elif expected.gbps is not None and rate.gbps > expected.gbps:
            faster.append("rate")
        if expected.width is not None and rate.width is not None and rate.width < expected.width:
            slower.append("width")
            remedies.insert(0, width_remedy(hca))
        elif expected.width is not None and rate.width is not None and rate.width > expected.width:
            faster.append("width")
    hint = _could_be_problem(hca, port) if ctx.rule("use_could_be") else None
    if port.could_be is not None:
        evidence["could_be"] = port.could_be.describe()

    runs = f"port runs at {rate.describe()}"
    if slower and is_efa(hca):
        return _judge_efa_slower(ctx, port, rate, expected, evidence)
    if slower or hint:
        wanted = []
        if expected is not None and slower:
            wanted.append(f"expected {_describe(expected.gbps, expected.width, port.link_layer)} ({expected.basis})")
        if hint:
            wanted.append(hint[0])
            if not remedies:
                remedies.append(hint[1])
        return ctx.graded(ctx.rule("degraded_severity"), port.name, f"{runs}, {'; '.join(wanted)}",
                          evidence=evidence, remedy="; ".join(remedies), rule="degraded")
    if faster and expected is not None:
        return ctx.graded(ctx.rule("faster_severity"), port.name,
                          f"{runs}, faster than expected {_describe(expected.gbps, expected.width, port.link_layer)} "
                          f"({expected.basis})", evidence=evidence, rule="faster",
                          remedy=(f"if port class '{port_class.name}' is out of date, update its expected_rate_gbps/"
                                  f"expected_width in rule pack '{ctx.pack.name}'" if port_class is not None else
                                  "if the expectation is out of date, update the rule pack's port classes")
                                 + "; if the expectation came from peers, the other ports are the degraded ones")
    if expected is None:
        return ctx.passed(port.name, f"{rate.describe()}; no reference rate (no port-class rate and fewer than "
                                     "two active ports of this HCA type)", evidence=evidence)
    return ctx.passed(port.name, f"{rate.describe()} as expected ({expected.basis})", evidence=evidence)


# amzn-drivers before r2.13.0 (and devices without the attribute) report every EFA device at
# EFA_DEFAULT_LINK_SPEED_GBPS as 4X EDR; later drivers report the device's own link speed.
EFA_DEFAULT_RATE = LinkRate(100.0, 4, "EDR")


def _judge_efa_slower(ctx: CheckContext, port: Port, rate: LinkRate, expected: Expectation | None,
                      evidence: dict[str, object]) -> Finding:
    """An EFA device reports its link speed from a device attribute, not a cable: below the
    expectation it is another device generation, or a driver that reports the default."""
    assert expected is not None
    wanted = f"expected {_describe(expected.gbps, expected.width, port.link_layer)} ({expected.basis})"
    if (rate.gbps, rate.width, rate.speed) == (EFA_DEFAULT_RATE.gbps, EFA_DEFAULT_RATE.width, EFA_DEFAULT_RATE.speed):
        return ctx.graded(ctx.rule("efa_default_rate_severity"), port.name,
                          f"EFA reports {rate.describe()}, the efa driver's default when it does not read the "
                          f"device's link speed (drivers before r2.13.0), {wanted}",
                          evidence={**evidence, "efa_default_rate": True}, rule="efa_default_rate",
                          remedy="update the efa driver (the EFA installer) so it reports the device's speed; if "
                                 "it still reads 100 Gb/s, the instance is not the type the rule pack describes")
    return ctx.graded(ctx.rule("degraded_severity"), port.name, f"EFA device reports {rate.describe()}, {wanted}",
                      evidence=evidence, rule="degraded",
                      remedy="EFA's rate is the device's own, not a cable's: a slower device is another EFA "
                             "generation than the rule pack's instance type (check the instance type and the pack)")


@check("link-speed", "each active RDMA port's rate and width against the pack, its peers and iblinkinfo",
       needs=("rdma",), order=20)
def link_speed(ctx: CheckContext) -> Iterator[Finding]:
    ports = ctx.pack.classified_ports(ctx.inventory)
    judged = [(hca, port, port_class) for hca, port, port_class in ports
              if virtual_function_note(ctx.inventory, hca) is None]
    peers = [(hca, port, port_class) for hca, port, port_class in judged
             if port.is_active and (port_class is None or port_class.role != "unused")]
    for hca, port, port_class in ports:
        state = str(port.state) if port.state is not None else None
        through_pf = virtual_function_note(ctx.inventory, hca)
        if through_pf is not None:
            yield ctx.skip(port.name, through_pf, evidence={"state": state,
                                                            "physical_function": hca.physical_function})
        elif port_class is not None and port_class.role == "unused":
            yield ctx.skip(port.name, f"port class '{port_class.name}' is unused", evidence={"state": state})
        elif port.state is None:
            yield ctx.unknown(port.name, "port state unknown, so its rate cannot be judged: "
                                         + unavailable_reason(ctx.inventory, *RATE_SOURCES), evidence={"state": None})
        elif not port.is_active:
            yield ctx.skip(port.name, "port not active; see port-state", evidence={"state": state})
        elif port.rate is None or port.rate.gbps is None:
            yield ctx.unknown(port.name, "rate unknown: " + unavailable_reason(ctx.inventory, *RATE_SOURCES),
                              evidence={"state": state})
        else:
            yield _judge(ctx, hca, port, port_class, peers)
