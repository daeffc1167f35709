"""`transceiver`: each RDMA port's module (optical transceiver or active cable) within the
limits it publishes itself, and like the node's other modules of the same part.

A module running hot, a laser whose bias climbs towards its limit, or a lane whose received
power sinks are the early signs of a link that will start taking symbol errors and then
flap; the port still says ACTIVE at full rate. Modules publish their own alarm (and, in
ethtool's view, warning) limits; `mlxlink -m` shows only the alarm range, so a reading
within a margin (the pack) of an alarm limit warns. The node's other modules of the same
part are the second yardstick: a module far hotter, or a lane far weaker, than its
siblings is named even inside its limits. Passive copper cables have no diagnostics.
"""

from __future__ import annotations

from collections.abc import Iterator
from statistics import median

from netdoctor.checks import CheckContext, Finding, Status, check
from netdoctor.inventory.hardware import is_efa
from netdoctor.inventory.model import Hca, LinkLayer, ModuleDiagnostics, ModuleReading
from netdoctor.inventory.queries import virtual_function_note
from netdoctor.report.model import STATUS_SEVERITY
from netdoctor_plugins.remedy_words import commands, netdev_of

CHECK_ID = "transceiver"


def remedy(hca: Hca, netdev: str | None) -> str:
    """Reseat or swap the module, and the commands that read it on this port."""
    ethtool = f", `ethtool -m {netdev}` the same from the driver" if netdev else ""
    return ("clean the connectors and reseat the module (or the cable) at both ends; if it persists, swap it for a "
            f"known-good one: `mlxlink -d {hca.name} -m` shows the readings{ethtool}, `mlxlink -d {hca.name} -c` "
            "the link's error counters")


# Reading name -> (what, unit, margin pack key or None)
READINGS = {
    "temperature_c": ("temperature", "°C", "temperature_margin_c"),
    "voltage_v": ("supply voltage", "V", None),
    "bias_ma": ("laser bias", "mA", "bias_margin_fraction"),
    "tx_power_dbm": ("transmit power", "dBm", "power_margin_db"),
    "rx_power_dbm": ("receive power", "dBm", "power_margin_db"),
}


@check(CHECK_ID, "each RDMA port's module: temperature, voltage, per-lane bias and optical power within the module's "
       "own limits (with a margin) and like the node's modules of the same part", needs=("transceiver",), order=25)
def transceiver(ctx: CheckContext) -> Iterator[Finding]:
    inventory = ctx.inventory
    modules = inventory.transceivers
    unread: list[tuple[str, str]] = []
    devices: list[str] = []
    roce_netdevs: list[str] = []
    for hca, port, port_class in ctx.pack.classified_ports(inventory):
        if virtual_function_note(inventory, hca) is not None:
            continue
        if is_efa(hca):
            yield ctx.skip(port.name, "EFA: no port module at the instance (the cable is AWS's)")
            continue
        if port_class is not None and port_class.role != "compute":
            yield ctx.skip(port.name, f"{port.name}: port class '{port_class.name}' (role {port_class.role}) is not a "
                           "compute port; its module is not judged")
            continue
        module = modules.get(port.name) or (modules.get(port.netdev) if port.netdev else None)
        if module is None:
            unread.append((port.name, inventory.source(f"mlxlink-m-{hca.name}").reason()))
            devices.append(hca.name)
            if port.link_layer is LinkLayer.ETHERNET and (netdev := netdev_of(inventory, port)):
                roce_netdevs.append(netdev)
        else:
            roce = netdev_of(inventory, port) if port.link_layer is LinkLayer.ETHERNET else None
            yield _judge(ctx, port.name, module, modules, remedy(hca, roce))
    if unread and not modules:
        # No module read at all: one finding (MFT not installed, or not root), not one per port.
        yield ctx.unknown("node", f"no port module readings ({len(unread)} ports): {unread[0][1]}",
                          evidence={"ports": [name for name, _ in unread]},
                          remedy="install NVIDIA MFT (mlxlink) and run as root, then read each module: "
                                 + commands("`mlxlink -d {} -m`", devices)
                                 + ("; without MFT, `ethtool -m` reads RoCE ports' modules: "
                                    + commands("`ethtool -m {}`", roce_netdevs) if roce_netdevs else ""))
    else:
        for name, why in unread:
            yield ctx.unknown(name, f"no module reading for {name}: {why}")


def _judge(ctx: CheckContext, subject: str, module: ModuleDiagnostics, modules: dict[str, ModuleDiagnostics],
           fix: str) -> Finding:
    name = " ".join(part for part in (module.identifier, module.part_number, f"({module.vendor})" if module.vendor else None)
                    if part) or "module"
    evidence = {"source": module.source, "identifier": module.identifier, "vendor": module.vendor,
                "part_number": module.part_number, "serial": module.serial, "cable": module.cable,
                **{key: _reading_evidence(getattr(module, key)) for key in READINGS}}
    if not module.monitored:
        return ctx.passed(subject, f"{name}: no diagnostics to judge ({module.cable or 'no DOM readings'})",
                          evidence=evidence)
    problems: list[tuple[Status, str, str]] = []
    for key, (what, unit, margin_key) in READINGS.items():
        reading = getattr(module, key)
        if reading is not None:
            problems += _against_limits(ctx, reading, what, unit, margin_key)
    problems += _against_peers(ctx, subject, module, modules)
    if not problems:
        temperature = f"{module.temperature_c.values[0]:g} °C, " if module.temperature_c else ""
        return ctx.passed(subject, f"{name}: {temperature}within its limits and like its peers", evidence=evidence)
    status, _, rule = max(problems, key=lambda problem: STATUS_SEVERITY[problem[0]])
    summary = f"{name}: " + "; ".join(text for _, text, _ in sorted(problems, key=lambda p: -STATUS_SEVERITY[p[0]]))
    return ctx.finding(status, subject, summary, evidence=evidence, remedy=fix, rule=rule)


def _against_limits(ctx: CheckContext, reading: ModuleReading, what: str, unit: str,
                    margin_key: str | None) -> list[tuple[Status, str, str]]:
    problems = []
    lanes = len(reading.values) > 1
    for lane, value in enumerate(reading.values):
        where = f"{what} lane {lane + 1}" if lanes else what
        shown = f"{where} {value:g} {unit}"
        beyond = _beyond(value, reading)
        if beyond is not None:
            kind, side, limit = beyond
            status = ctx.severity("alarm_severity") if kind == "alarm" else ctx.severity("warning_severity")
            problems.append((status, f"{shown} {side} the module's {kind} limit {limit:g} {unit}", f"{kind}_severity"))
        elif margin_key is not None and reading.warning_high is None and reading.alarm_high is not None:
            margin = float(ctx.rule(margin_key))
            if margin_key == "bias_margin_fraction" and reading.alarm_low is not None:
                margin *= reading.alarm_high - reading.alarm_low
            if value > reading.alarm_high - margin:
                problems.append((ctx.severity("warning_severity"), f"{shown} within {margin:g} {unit} of the module's "
                                 f"alarm limit {reading.alarm_high:g} {unit}", margin_key))
            elif reading.alarm_low is not None and value < reading.alarm_low + margin and what != "temperature":
                problems.append((ctx.severity("warning_severity"), f"{shown} within {margin:g} {unit} of the module's "
                                 f"alarm limit {reading.alarm_low:g} {unit}", margin_key))
    return problems


def _beyond(value: float, reading: ModuleReading) -> tuple[str, str, float] | None:
    """The first of the module's limits `value` is past, alarm before warning: (kind, side, limit)."""
    for kind, low, high in (("alarm", reading.alarm_low, reading.alarm_high),
                            ("warning", reading.warning_low, reading.warning_high)):
        if high is not None and value > high:
            return kind, "above", high
        if low is not None and value < low:
            return kind, "below", low
    return None


def _against_peers(ctx: CheckContext, subject: str, module: ModuleDiagnostics,
                   modules: dict[str, ModuleDiagnostics]) -> list[tuple[Status, str, str]]:
    """Hotter, or a lane weaker, than the median of the node's monitored modules of this part."""
    peers = [other for key, other in modules.items() if key != subject and other.monitored
             and other.part_number == module.part_number and module.part_number]
    if len(peers) + 1 < int(ctx.rule("peer_min_modules")):
        return []
    problems = []
    temperatures = [peer.temperature_c.values[0] for peer in peers if peer.temperature_c]
    if module.temperature_c and temperatures:
        typical = median(temperatures)
        delta = module.temperature_c.values[0] - typical
        if delta > float(ctx.rule("peer_temperature_delta_c")):
            problems.append((ctx.severity("warning_severity"), f"{delta:g} °C hotter than the node's other "
                             f"{module.part_number} modules (median {typical:g} °C)", "peer_temperature_delta_c"))
    lanes = [value for peer in peers if peer.rx_power_dbm for value in peer.rx_power_dbm.values]
    if module.rx_power_dbm and lanes:
        typical = median(lanes)
        weak = [index + 1 for index, value in enumerate(module.rx_power_dbm.values)
                if typical - value > float(ctx.rule("peer_rx_power_delta_db"))]
        if weak:
            problems.append((ctx.severity("warning_severity"), f"receive power of lane(s) {', '.join(map(str, weak))} "
                             f"more than {float(ctx.rule('peer_rx_power_delta_db')):g} dB below the node's other "
                             f"{module.part_number} modules (median {typical:g} dBm)", "peer_rx_power_delta_db"))
    return problems


def _reading_evidence(reading: ModuleReading | None) -> dict[str, object] | None:
    if reading is None:
        return None
    return {"values": list(reading.values), "alarm": [reading.alarm_low, reading.alarm_high],
            "warning": [reading.warning_low, reading.warning_high]}
