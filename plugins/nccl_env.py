"""`nccl-env`: NCCL's settings (environment and config files) against the node they run on.

A setting that names a device the node lacks, or turns off a transport the node has, does
not fail a job: NCCL silently runs slower. `NCCL_IB_HCA=mlx5_9` on a node whose HCAs end at
mlx5_7 leaves NCCL no InfiniBand device, and it falls back to TCP sockets; `NCCL_IB_HCA=
mlx5_1` also selects mlx5_10..mlx5_17 (NCCL matches prefixes unless the list starts with
`=`); `NCCL_IB_GID_INDEX=3` on a RoCE port whose netdev has no IPv4 address gives NCCL a GID
that does not exist; `NCCL_P2P_DISABLE=1` left over from a debug session sends NVLink
traffic through host memory. Settings are read as NCCL reads them (netdoctor.parsers.
nccl_env): the environment wins over `$NCCL_CONF_FILE` or `~/.nccl.conf`, which win over
`/etc/nccl.conf`. Inside a job, `srun netdoctor check --only nccl-env` judges the job's own.

A setting may be huge (a generated 10,000-entry NCCL_IB_HCA): each kind of problem is one
finding naming its first few entries and their count, and a value is quoted up to a bounded
length, so the report stays small whatever the environment holds.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

from netdoctor.checks import CheckContext, Finding, check
from netdoctor.inventory.hardware import is_efa
from netdoctor.inventory.model import GID_SLOTS_READ, Hca, LinkLayer, Netdev, Port
from netdoctor.inventory.queries import gpu_fabric_netdevs
from netdoctor.util import cut_text, listed, natural_key
from netdoctor.parsers.nccl_env import (
    MAX_DEVICE_ENTRIES,
    DeviceFilter,
    NcclSettings,
    Setting,
    is_plain_integer,
    nccl_c_int,
    nccl_integer,
    nccl_path_level,
    parse_device_filter,
)
from netdoctor_plugins.nccl_env_socket import socket_ifname
from netdoctor_plugins.nccl_env_text import EVIDENCE_ITEMS, QUOTED, SHOWN
from netdoctor_plugins.nccl_env_text import origin as _origin
from netdoctor_plugins.nccl_env_text import quoted as _quoted
from netdoctor_plugins.nccl_env_text import remedy as _remedy
from netdoctor_plugins.remedy_words import netdev_of, unknown_netdev

CHECK_ID = "nccl-env"


@check(CHECK_ID, "NCCL settings (environment, NCCL_CONF_FILE, ~/.nccl.conf, /etc/nccl.conf) against the node: "
       "NCCL_IB_HCA / NCCL_SOCKET_IFNAME name present, active compute devices without prefix traps, "
       "NCCL_IB_GID_INDEX names a RoCE v2 GID with an address, no *_DISABLE that cripples a fabric the node has",
       needs=("nccl-env",), order=85)
def nccl_env(ctx: CheckContext) -> Iterator[Finding]:
    inventory = ctx.inventory
    nccl = inventory.nccl
    assert nccl is not None      # the needs gate (need_nccl_env) ran first
    findings = [*_withheld_files(ctx, nccl), *_ignored_lines(ctx, nccl), *_flags_not_as_written(ctx, nccl),
                *_disabled_transports(ctx, nccl), *_ib_hca(ctx, nccl),
                *socket_ifname(ctx, nccl), *_gid_index(ctx, nccl), *cloud_fabric_settings(ctx, nccl)]
    yield from findings
    if not findings:
        evidence = {"settings": {name: {"value": cut_text(setting.value, QUOTED), "origin": setting.origin}
                                 for name, setting in sorted(nccl.settings.items())},
                    "files_read": list(nccl.files_read)}
        if nccl.settings:
            yield ctx.passed("node", f"{len(nccl.settings)} NCCL setting(s) fit the node", evidence=evidence)
        else:
            yield ctx.passed("node", "no NCCL settings: NCCL's defaults (every active RDMA device, GPUDirect where "
                             "the topology allows)", evidence=evidence)


def _withheld_files(ctx: CheckContext, nccl: NcclSettings) -> Iterator[Finding]:
    """A config file NCCL would read that this run did not (root reads only root's files) or
    a snapshot does not carry (others cannot read it): its settings are not judged."""
    for path, why in nccl.withheld:
        yield ctx.unknown(path, f"NCCL config file {path} not judged: {why}",
                          remedy=f"run `netdoctor check --only nccl-env` as the user whose job reads {path}")


def _ignored_lines(ctx: CheckContext, nccl: NcclSettings) -> Iterator[Finding]:
    """One finding per line NCCL skips; past SHOWN of them, one finding naming the first few and the count."""
    total = len(nccl.ignored) + nccl.ignored_more
    if total <= SHOWN:
        for line in nccl.ignored:
            yield ctx.graded(ctx.severity("ignored_line_severity"), f"{line.path}:{line.line_number}",
                             f"{line.path} line {line.line_number} {_quoted(line.text)} is not applied by NCCL: {line.why}",
                             remedy="write NAME=value with no spaces around '='", rule="ignored_line_severity")
        return
    first = nccl.ignored[0]
    named = [f"{line.path}:{line.line_number} {_quoted(line.text[:60])} ({line.why.split(':')[0]})"
             for line in nccl.ignored[:SHOWN]]
    yield ctx.graded(ctx.severity("ignored_line_severity"), first.path,
                     f"{total:,} lines of NCCL's config files are not applied by NCCL: {listed(named, SHOWN, total=total)}",
                     evidence={"lines": total, "first": [f"{line.path}:{line.line_number}"
                                                         for line in nccl.ignored[:EVIDENCE_ITEMS]]},
                     remedy="write NAME=value with no spaces around '='", rule="ignored_line_severity")


def _compute_ports(ctx: CheckContext) -> list[tuple[Hca, Port]]:
    return [(hca, port) for hca, port, port_class in ctx.pack.classified_ports(ctx.inventory)
            if port_class is None or port_class.role == "compute"]


# How NCCL reads each flag the check judges, and what it turns off: NCCL_IB_DISABLE is an
# NCCL_PARAM read with strtoll, any non-zero disables (src/transport/net_ib/init.cc
# `if (ncclParamIbDisable())`); NCCL_SHM_DISABLE likewise, but only 1 disables
# (src/transport/shm.cc `ncclParamShmDisable() == 1`); NCCL_P2P_DISABLE is read by
# ncclGetLevel with a bare `(int) strtol` and only 1 disables (src/graph/paths.cc).
_FLAGS = {"NCCL_IB_DISABLE": ("InfiniBand/RoCE", lambda value: (nccl_integer(value) or 0) != 0),
          "NCCL_SHM_DISABLE": ("shared memory", lambda value: nccl_integer(value) == 1),
          "NCCL_P2P_DISABLE": ("GPU peer-to-peer", lambda value: nccl_c_int(value) == 1)}


def _flag(nccl: NcclSettings, name: str) -> Setting | None:
    """The setting when NCCL, reading it as NCCL does, turns its flag on."""
    setting = nccl.get(name)
    return setting if setting is not None and _FLAGS[name][1](setting.value) else None


def _read_as(value: str, name: str) -> int | None:
    return nccl_c_int(value) if name == "NCCL_P2P_DISABLE" else nccl_integer(value)


def _flags_not_as_written(ctx: CheckContext, nccl: NcclSettings) -> Iterator[Finding]:
    """A flag written as a word (`true`, `yes`) or with trailing text that NCCL's integer reading
    leaves off: `NCCL_IB_DISABLE=true` is 0 to NCCL, so InfiniBand stays on. Its author meant
    something else, and the node runs as if the line were not there; a flag NCCL does turn on is
    judged by what it turns off (_disabled_transports)."""
    for name, (transport, turns_on) in _FLAGS.items():
        setting = nccl.get(name)
        if setting is None or not setting.value or is_plain_integer(setting.value) or turns_on(setting.value):
            continue
        number = _read_as(setting.value, name)
        read = "NCCL's default (out of range)" if number is None else str(number)
        yield ctx.graded(ctx.severity("flag_not_integer_severity"), name,
                         f"NCCL reads {name}={_quoted(setting.value)} as {read}: {transport} stays on; write 0 or 1"
                         f" ({'from the environment' if setting.origin == 'environment' else 'in ' + setting.origin})",
                         evidence={"value": cut_text(setting.value, QUOTED), "read_as": number},
                         rule="flag_not_integer_severity",
                         remedy=_remedy(setting, f"remove {name}, or write {name}=1 if {transport} is meant to be off"))


def _disabled_transports(ctx: CheckContext, nccl: NcclSettings) -> Iterator[Finding]:
    inventory = ctx.inventory
    active = [(hca, port) for hca, port in _compute_ports(ctx) if port.is_active]
    active_rdma = [port.name for _, port in active]
    # NCCL's own IB transport drives these; EFA it reaches through aws-ofi-nccl, which ignores NCCL_IB_*.
    active_ib_transport = [port.name for hca, port in active if not is_efa(hca)]
    gpus = len(inventory.gpus)
    nvlink = any(gpu.nvlinks or gpu.nvlink_total for gpu in inventory.gpus)
    if active_ib_transport and (setting := _flag(nccl, "NCCL_IB_DISABLE")):
        yield ctx.graded(ctx.severity("ib_disable_severity"), setting.name,
                         f"{_origin(setting)} turns off NCCL's InfiniBand/RoCE transport on a node with "
                         f"{len(active_ib_transport)} active compute RDMA port(s): inter-node traffic goes over TCP sockets",
                         evidence={"active_compute_ports": active_ib_transport}, rule="ib_disable_severity",
                         remedy=_remedy(setting, "remove NCCL_IB_DISABLE"))
    net = nccl.get("NCCL_NET")
    fabric_netdevs = sorted(gpu_fabric_netdevs(inventory) or {}, key=natural_key)
    fabric = active_rdma or fabric_netdevs
    # NCCL compares NCCL_NET with each plugin's name by strcasecmp, untrimmed (src/plugin/net.cc).
    if fabric and net is not None and net.value.lower() == "socket":
        what = (f"{len(active_rdma)} active compute RDMA port(s)" if active_rdma
                else f"{len(fabric_netdevs)} GPUDirect-TCPX NICs ({', '.join(fabric_netdevs)})")
        plugin = "set it to IB" if active_ib_transport else "set it to the network plugin's name"
        yield ctx.graded(ctx.severity("net_socket_severity"), net.name,
                         f"{_origin(net)} forces NCCL onto TCP sockets on a node with {what}",
                         evidence={"active_compute_ports": active_rdma, "fabric_netdevs": fabric_netdevs},
                         rule="net_socket_severity", remedy=_remedy(net, f"remove NCCL_NET (or {plugin})"))
    level = nccl.get("NCCL_NET_GDR_LEVEL")
    if active_rdma and gpus and level is not None and nccl_path_level(level.value) == "LOC":
        yield ctx.graded(ctx.severity("gdr_disabled_severity"), level.name,
                         f"{_origin(level)} turns GPUDirect RDMA off: every inter-node transfer is staged "
                         "through host memory", rule="gdr_disabled_severity",
                         remedy=_remedy(level, "remove NCCL_NET_GDR_LEVEL (NCCL picks it from the topology)"))
    if gpus >= 2:
        p2p = _flag(nccl, "NCCL_P2P_DISABLE") or (
            level_setting if (level_setting := nccl.get("NCCL_P2P_LEVEL")) is not None
            and nccl_path_level(level_setting.value) == "LOC" else None)
        if p2p is not None:
            path = "NVLink" if nvlink else "PCIe peer-to-peer"
            yield ctx.graded(ctx.severity("p2p_disable_severity"), p2p.name,
                             f"{_origin(p2p)} turns off GPU peer-to-peer: traffic between the node's {gpus} GPUs "
                             f"goes through host memory instead of {path}", rule="p2p_disable_severity",
                             remedy=_remedy(p2p, f"remove {p2p.name}"))
        if setting := _flag(nccl, "NCCL_SHM_DISABLE"):
            yield ctx.graded(ctx.severity("shm_disable_severity"), setting.name,
                             f"{_origin(setting)} turns off NCCL's shared-memory transport: GPUs without a "
                             "peer-to-peer path fall back to the network", rule="shm_disable_severity",
                             remedy=_remedy(setting, "remove NCCL_SHM_DISABLE"))


def _ib_hca(ctx: CheckContext, nccl: NcclSettings) -> Iterator[Finding]:
    setting = nccl.get("NCCL_IB_HCA")
    inventory = ctx.inventory
    if setting is None or all(is_efa(hca) for hca in inventory.hcas):
        return      # no HCA, or only EFA: aws-ofi-nccl does not read NCCL_IB_HCA
    selection = parse_device_filter(setting.value)
    names = sorted((hca.name for hca in inventory.hcas), key=lambda name: (len(name), name))
    verb = "excludes" if selection.exclude else "selects"
    absent: list[str] = []
    traps: list[str] = []
    pulled_in: list[str] = []
    for entry in selection.entries:
        matched = [name for name in names if selection.entry_matches(entry, name)]
        shown = cut_text(entry.name, 60) + (f":{entry.port}" if entry.port is not None else "")
        if not matched and not selection.exclude:
            absent.append(shown)
        elif entry.name in names and len(matched) > 1:
            extra = [name for name in matched if name != entry.name]
            traps.append(f"{shown!r} also {verb} {', '.join(extra)}")
            pulled_in.extend(name for name in extra if name not in pulled_in)
    # One finding per kind of problem, however many entries have it (never one per entry).
    if absent:
        which = ("entry names" if len(absent) == 1 else f"{len(absent):,} entries name") if not selection.more \
            else f"{len(absent):,} of the first {MAX_DEVICE_ENTRIES} of its {selection.count:,} entries name"
        unread = f"; the other {selection.more:,} were not read" if selection.more else ""
        yield ctx.graded(ctx.severity("absent_device_severity"), setting.name,
                         f"{_origin(setting)}: {which} no RDMA device of this node: "
                         f"{listed([repr(name) for name in absent[:SHOWN]], SHOWN, total=len(absent))} "
                         f"(the node has {listed(names, 2 * SHOWN)}){unread}",
                         evidence={"devices": names[:EVIDENCE_ITEMS], "absent": absent[:EVIDENCE_ITEMS],
                                   "absent_entries": len(absent), "entries": selection.count},
                         rule="absent_device_severity",
                         remedy=_remedy(setting, _write_hca(ctx, "name the node's devices (ibdev2netdev lists them)")))
    if traps:
        exact = cut_text(("^=" if selection.exclude else "=") + setting.value.lstrip("^="), QUOTED)
        yield ctx.graded(ctx.severity("prefix_trap_severity"), setting.name,
                         f"{_origin(setting)}: {listed(traps, SHOWN)} (NCCL matches prefixes unless the list "
                         "starts with '=')",
                         evidence={f"also_{'excluded' if selection.exclude else 'selected'}": pulled_in[:EVIDENCE_ITEMS]},
                         rule="prefix_trap_severity", remedy=_remedy(setting, f"write NCCL_IB_HCA='{exact}'"))
    yield from _ib_hca_coverage(ctx, setting, selection)


def _ib_hca_coverage(ctx: CheckContext, setting: Setting, selection: DeviceFilter) -> Iterator[Finding]:
    """What the list selects: no usable port at all, ports that are down, compute ports left out, others pulled in."""
    compute = {port.name for _, port in _compute_ports(ctx)}
    selected = [(hca, port) for hca in ctx.inventory.hcas for port in hca.ports.values()
                if selection.selects(hca.name, port.number)]
    usable = [port.name for _, port in selected if port.is_active and port.name in compute]
    if not usable:
        if selection.exclude or any(selected):
            yield ctx.graded(ctx.severity("absent_device_severity"), setting.name,
                             f"{_origin(setting)} leaves NCCL no active compute RDMA port: inter-node traffic "
                             "falls back to TCP sockets",
                             evidence={"selected": [port.name for _, port in selected][:EVIDENCE_ITEMS]},
                             rule="absent_device_severity",
                             remedy=_remedy(setting, _write_hca(ctx, "select the active compute ports")))
        return
    down = [port.name for _, port in selected if port.name in compute and not port.is_active]
    if down:
        yield ctx.graded(ctx.severity("inactive_device_severity"), setting.name,
                         f"{_origin(setting)} selects {listed(down, SHOWN)}, which {'is' if len(down) == 1 else 'are'} "
                         "not ACTIVE: NCCL skips them and runs on fewer rails", evidence={"not_active": down},
                         rule="inactive_device_severity",
                         remedy=f"bring {listed(down, SHOWN)} up (port-state says why "
                                f"{'it is' if len(down) == 1 else 'they are'} down), or "
                                + _remedy(setting, _write_hca(ctx, "leave them out")))
    left_out = sorted(name for name in compute if name not in {port.name for _, port in selected}
                      and (port := ctx.inventory.port(name)) is not None and port.is_active)
    if left_out:
        yield ctx.graded(ctx.severity("unselected_compute_severity"), setting.name,
                         f"{_origin(setting)} leaves out {len(left_out)} of {len(compute)} compute port(s) "
                         f"({listed(left_out, SHOWN)}): jobs run on {len(usable)} rail(s)",
                         evidence={"left_out": left_out, "used": usable}, rule="unselected_compute_severity",
                         remedy=_remedy(setting, _write_hca(ctx, "list every compute port") + ", or unset NCCL_IB_HCA"))
    other = [port.name for _, port in selected if port.name not in compute]
    if other:
        yield ctx.graded(ctx.severity("non_compute_selected_severity"), setting.name,
                         f"{_origin(setting)} also selects {listed(other, SHOWN)}, which the rule pack classes as "
                         "not compute (storage or management): NCCL will put job traffic on them",
                         evidence={"not_compute": other}, rule="non_compute_selected_severity",
                         remedy=_remedy(setting, _write_hca(ctx, "use '=' with exact names, or exclude them with '^'")))


def _gid_index(ctx: CheckContext, nccl: NcclSettings) -> Iterator[Finding]:
    setting = nccl.get("NCCL_IB_GID_INDEX")
    if setting is None:
        return
    # An NCCL_PARAM (src/transport/net_ib/connect.cc IbGidIndex, default -1): "three" reads as 0.
    index = nccl_integer(setting.value)
    if index is None:
        return                    # empty or out of range: NCCL keeps its default (-1)
    if setting.value and not is_plain_integer(setting.value):
        yield ctx.graded(ctx.severity("flag_not_integer_severity"), setting.name,
                         f"NCCL reads {setting.name}={_quoted(setting.value)} as {index}",
                         evidence={"read_as": index}, rule="flag_not_integer_severity",
                         remedy=_remedy(setting, "set a number (3 is RoCE v2 over IPv4 on most nodes)"))
    if index < 0:
        return                    # -1: NCCL picks a RoCE v2 GID itself (NCCL >= 2.21)
    selection = parse_device_filter(nccl.get("NCCL_IB_HCA").value) if nccl.get("NCCL_IB_HCA") else None
    for _, port in _compute_ports(ctx):
        if port.link_layer is not LinkLayer.ETHERNET or not port.is_active:
            continue
        if selection is not None and not selection.selects(port.hca, port.number):
            continue
        yield from _judge_gid(ctx, setting, index, port)


def _judge_gid(ctx: CheckContext, setting: Setting, index: int, port: Port) -> Iterator[Finding]:
    netdev = f" (netdev {port.netdev})" if port.netdev else ""
    if port.gids is None or index >= GID_SLOTS_READ:
        yield ctx.unknown(port.name, f"{_origin(setting)}: the GID table of {port.name} was not read "
                          f"(netdoctor reads the first {GID_SLOTS_READ} entries)")
        return
    gid = port.gids.get(index)
    if gid is None or not gid.has_address:
        present = ", ".join(f"{number}: {entry.kind}" for number, entry in sorted(port.gids.items()) if entry.has_address)
        yield ctx.graded(ctx.severity("gid_index_severity"), port.name,
                         f"{_origin(setting)}: {port.name}{netdev} has no GID at index {index} (present: "
                         f"{present or 'none'}); NCCL cannot create queue pairs on it",
                         evidence={"gids": {number: [entry.kind, entry.address] for number, entry in port.gids.items()}},
                         rule="gid_index_severity",
                         remedy=f"{_address_fix(ctx, port)}, or {_gid_fix(port)}")
    elif gid.kind != "RoCE v2":
        yield ctx.graded(ctx.severity("gid_v1_severity"), port.name,
                         f"{_origin(setting)}: GID {index} of {port.name}{netdev} is {gid.kind}, not RoCE v2: "
                         "the traffic is not routable across an L3 fabric and misses DSCP-based PFC/ECN",
                         rule="gid_v1_severity", remedy=_gid_fix(port))


def _write_hca(ctx: CheckContext, otherwise: str) -> str:
    """The NCCL_IB_HCA that names exactly the node's active compute ports, or `otherwise` where none is active."""
    ports = sorted((port.name for hca, port in _compute_ports(ctx) if port.is_active and not is_efa(hca)),
                   key=natural_key)
    return f"write NCCL_IB_HCA='={','.join(ports)}', the active compute ports" if ports else otherwise


def _address_fix(ctx: CheckContext, port: Port) -> str:
    netdev = netdev_of(ctx.inventory, port)
    if netdev is None:
        return f"give the netdev of {port.name} its IPv4 address ({unknown_netdev(port.name)})"
    return (f"give {netdev} its IPv4 address (`ip -br addr show {netdev}`; the RoCE v2 IPv4 GID appears with it)")


def _gid_fix(port: Port) -> str:
    """Point NCCL_IB_GID_INDEX at a RoCE v2 IPv4 entry of this port, naming one where the table has it."""
    v2 = sorted(number for number, entry in (port.gids or {}).items()
                if entry.kind == "RoCE v2" and entry.has_address and _ipv4_mapped(entry.address or ""))
    there = f": NCCL_IB_GID_INDEX={v2[0]} is one on {port.name}" if v2 else ""
    return f"set NCCL_IB_GID_INDEX to a RoCE v2 entry{there} (`show_gids {port.hca} {port.number}` lists them)"


def _ipv4_mapped(address: str) -> bool:
    """A GID that carries an IPv4 address (`::ffff:10.0.0.5`, as the GID table writes it in full)."""
    try:
        return ipaddress.IPv6Address(address).ipv4_mapped is not None
    except ValueError:
        return False


# NCCL's network plugins on cloud fabrics and the settings that name their interfaces:
# GPUDirect-TCPX (a3-high) and TCPXO/FasTrak (a3-mega) each take a data-NIC list and a control NIC.
TCPX_INTERFACE_LISTS = ("NCCL_GPUDIRECTTCPX_SOCKET_IFNAME", "NCCL_FASTRAK_IFNAME")
TCPX_CONTROL_DEVICES = ("NCCL_GPUDIRECTTCPX_CTRL_DEV", "NCCL_FASTRAK_CTRL_DEV")


def cloud_fabric_settings(ctx: CheckContext, nccl: NcclSettings) -> Iterator[Finding]:
    """AWS EFA: FI_PROVIDER and NCCL_NET must leave libfabric's efa provider to aws-ofi-nccl. GCP
    TCPX/TCPXO: the plugin's interface lists must name the GPU NICs, up."""
    inventory = ctx.inventory
    if any(port.is_active and is_efa(hca) for hca, port in _compute_ports(ctx)):
        provider = nccl.get("FI_PROVIDER")
        if provider is not None and not _selects_efa(provider.value):
            yield ctx.graded(ctx.severity("fi_provider_severity"), provider.name,
                             f"{_origin(provider)} keeps libfabric off EFA: aws-ofi-nccl runs over that provider "
                             "(TCP at best) instead of the EFA devices", rule="fi_provider_severity",
                             remedy=_remedy(provider, "set FI_PROVIDER=efa or remove it"))
        net = nccl.get("NCCL_NET")
        if net is not None and net.value.lower() == "ib":
            yield ctx.graded(ctx.severity("net_socket_severity"), net.name,
                             f"{_origin(net)} asks for NCCL's InfiniBand transport, which cannot open EFA devices: "
                             "NCCL fails to start or runs on sockets", rule="net_socket_severity",
                             remedy=_remedy(net, "remove NCCL_NET (aws-ofi-nccl registers itself as Libfabric)"))
    fabric = gpu_fabric_netdevs(inventory)
    if not fabric:
        return
    netdevs = {netdev.name: netdev for netdev in inventory.netdevs}
    for name in (*TCPX_INTERFACE_LISTS, *TCPX_CONTROL_DEVICES):
        setting = nccl.get(name)
        if setting is None:
            continue
        # The first MAX_DEVICE_ENTRIES items: a huge list costs no more (the plugin reads a handful).
        items = [item.strip() for item in setting.value.split(",", MAX_DEVICE_ENTRIES)[:MAX_DEVICE_ENTRIES]
                 if item.strip()]
        bad = [item for item in items if item not in netdevs or netdevs[item].operstate != "up"]
        if bad:
            states = [f"{item} ({netdevs[item].operstate or 'state unknown'})" if item in netdevs
                      else f"{cut_text(item, 60)} (no such interface)" for item in bad]
            yield ctx.graded(ctx.severity("socket_ifname_severity"), setting.name,
                             f"{_origin(setting)} names interfaces NCCL's TCPX plugin cannot use: {listed(states, SHOWN)}",
                             evidence={"listed": items[:EVIDENCE_ITEMS], "gpu_nics": fabric},
                             rule="socket_ifname_severity",
                             remedy=_remedy(setting, _tcpx_fix(name, fabric, netdevs)))
        elif name in TCPX_INTERFACE_LISTS and (left := sorted(set(fabric) - set(items), key=natural_key)):
            yield ctx.graded(ctx.severity("unselected_compute_severity"), setting.name,
                             f"{_origin(setting)} leaves out GPU NICs {', '.join(left)}: their GPUs' traffic "
                             "crosses to another NIC", evidence={"listed": items[:EVIDENCE_ITEMS], "gpu_nics": fabric},
                             rule="unselected_compute_severity",
                             remedy=_remedy(setting, f"add {', '.join(left)}"))


def _tcpx_fix(name: str, fabric: dict[str, list[str]], netdevs: dict[str, Netdev]) -> str:
    """The value that names the GPU NICs that are up; a control device is the node's other NIC, named in words."""
    if name in TCPX_CONTROL_DEVICES:
        return "name the control NIC (the primary interface, not a GPU NIC) that is up (`ip -br link`)"
    up = [nic for nic in sorted(fabric, key=natural_key) if nic in netdevs and netdevs[nic].operstate == "up"]
    return (f"write {name}={','.join(up)} (the GPU NICs that are up)" if up
            else "name the GPU NICs once they are up (`ip -br link`; fabric-netdevs says why they are not)")


def _selects_efa(value: str) -> bool:
    """libfabric's FI_PROVIDER filter (ofi_create_filter): a list of providers to use, or, with a
    leading `^`, of providers to leave out; `efa` may carry a utility provider (`efa;ofi_rxm`)."""
    text = value.strip().lower()
    negated = text.startswith("^")
    names = {item.strip().split(";")[0] for item in text.removeprefix("^").split(",") if item.strip()}
    return ("efa" in names) != negated
