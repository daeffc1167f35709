"""`nccl-env`'s judgement of NCCL_SOCKET_IFNAME: the interfaces NCCL's bootstrap (and its socket
transport) may use, as NCCL finds them (defines no check; plugins/nccl_env.py calls it).

NCCL (src/misc/socket.cc ncclFindInterfaces, then findInterfaces / src/os/linux.cc
ncclOsFindInterfaces) reads NCCL_SOCKET_IFNAME only when it is longer than one character, takes
a leading `^` (exclude) then `=` (exact names), splits the rest on `,` into at most MAX_IFS (16)
entries `name[:port]` (parseStringList, src/misc/utils.cc; the port is ignored for interfaces),
and matches each interface name by prefix, or whole with `=` (matchIfList: strncmp, case
matters). It walks getifaddrs(): an entry counts only with an AF_INET or AF_INET6 address
(IPv6 `::1` skipped; NCCL_SOCKET_FAMILY=AF_INET/AF_INET6 keeps one family), and since NCCL 2.28
only while the interface is IFF_RUNNING. An interface that is up without an address is never
found: with nothing found, bootstrap has no interface and the job does not start (NVIDIA/nccl#1837:
NCCL then fails with an address of family 0).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator
from dataclasses import replace

from netdoctor.checks import CheckContext, Finding
from netdoctor.inventory.model import Netdev
from netdoctor.parsers.nccl_env import NcclSettings, Setting, parse_device_filter
from netdoctor.util import cut_text, listed, natural_key
from netdoctor_plugins.nccl_env_text import EVIDENCE_ITEMS, SHOWN, origin, remedy

MAX_IFS = 16                          # src/include/socket.h: the entries NCCL reads of the list
# IFF_RUNNING: the kernel's operstate UP, or UNKNOWN for drivers that report none (lo, tun).
_RUNNING = ("up", "unknown")
_FAMILIES = {"AF_INET": 4, "AF_INET6": 6}


def _usable_addresses(netdev: Netdev, family: int | None) -> list[ipaddress.IPv4Interface | ipaddress.IPv6Interface]:
    """The addresses NCCL would find on `netdev` ([] when none; the caller checks addresses is not None)."""
    found = []
    for text in netdev.addresses or ():
        try:
            address = ipaddress.ip_interface(text)
        except ValueError:
            continue                      # not an address (the parser keeps only addresses; bad input is skipped)
        if (family is not None and address.version != family) or (address.version == 6 and address.ip.is_loopback):
            continue
        found.append(address)
    return found


def socket_ifname(ctx: CheckContext, nccl: NcclSettings) -> Iterator[Finding]:
    setting = nccl.get("NCCL_SOCKET_IFNAME")
    if setting is None or len(setting.value) <= 1:
        return                            # unset, or one character: NCCL picks interfaces itself
    parsed = parse_device_filter(setting.value)
    selection = replace(parsed, entries=parsed.entries[:MAX_IFS])
    family_setting = nccl.get("NCCL_SOCKET_FAMILY")
    family = _FAMILIES.get(family_setting.value) if family_setting is not None else None
    netdevs = {netdev.name: netdev for netdev in ctx.inventory.netdevs}
    selected = [name for name in sorted(netdevs) if selection.selects(name)]
    up = [name for name in selected if netdevs[name].operstate in _RUNNING]
    if not up:
        state = (f"{listed(selected, SHOWN)} {'is' if len(selected) == 1 else 'are'} not up" if selected
                 else f"it matches none of {listed(sorted(netdevs), SHOWN) or 'no interfaces'}")
        yield ctx.graded(ctx.severity("socket_ifname_severity"), setting.name,
                         f"{origin(setting)} gives NCCL no usable interface ({state}): NCCL's bootstrap "
                         "fails and jobs do not start", evidence={"selected": selected[:EVIDENCE_ITEMS]},
                         rule="socket_ifname_severity",
                         remedy=remedy(setting, "name an interface that is up" + _candidates(netdevs.values(), family)))
        return
    yield from _addresses(ctx, setting, [netdevs[name] for name in up], family)
    if not selection.exclude:
        missing = [entry.name for entry in selection.entries
                   if not any(selection.entry_matches(entry, name) for name in netdevs)]
        if missing:
            yield ctx.graded(ctx.severity("socket_ifname_entry_severity"), setting.name,
                             f"{origin(setting)}: {listed([repr(cut_text(name, 60)) for name in missing], SHOWN)} "
                             f"match(es) no interface of this node; NCCL uses {listed(up, SHOWN)}",
                             evidence={"unmatched_entries": len(missing), "entries": selection.count},
                             rule="socket_ifname_entry_severity",
                             remedy=remedy(setting, "drop the names this node does not have"))


def _addresses(ctx: CheckContext, setting: Setting, up: list[Netdev], family: int | None) -> Iterator[Finding]:
    """Up is not enough: NCCL finds an interface only through an address. Judged where the
    addresses were read (`ip -j address show`); a snapshot without them judges only the state."""
    if any(netdev.addresses is None for netdev in up):
        return
    usable = {netdev.name: _usable_addresses(netdev, family) for netdev in up}
    evidence = {"up": [netdev.name for netdev in up][:EVIDENCE_ITEMS],
                "addresses": {name: [str(address) for address in found] for name, found in usable.items()
                              if found}}
    which = "IPv4" if family == 4 else "IPv6" if family == 6 else "IPv4 or IPv6"
    if not any(usable.values()):
        names = [netdev.name for netdev in up]
        yield ctx.graded(ctx.severity("socket_ifname_address_severity"), setting.name,
                         f"{origin(setting)} selects {listed(names, SHOWN)}, up but with no {which} address: "
                         "NCCL finds an interface only through its address, so bootstrap finds none and jobs "
                         "do not start", evidence=evidence, rule="socket_ifname_address_severity",
                         remedy=f"give {names[0]} its address (`ip -br addr show {names[0]}`; the node's network "
                                "configuration), or " + remedy(setting, "name an interface that has one"
                                                                 + _candidates(ctx.inventory.netdevs, family)))
        return
    if all(address.version == 6 and address.ip.is_link_local for found in usable.values() for address in found):
        names = [name for name, found in usable.items() if found]
        yield ctx.graded(ctx.severity("socket_ifname_link_local_severity"), setting.name,
                         f"{origin(setting)}: {listed(names, SHOWN)} {'has' if len(names) == 1 else 'have'} only an "
                         "IPv6 link-local (fe80::) address: NCCL uses it, with this node's interface index as its "
                         "scope, and peers reach it only where the same index names the same link; bootstrap "
                         "across nodes can time out", evidence=evidence, rule="socket_ifname_link_local_severity",
                         remedy=f"give {names[0]} an IPv4 or global IPv6 address, or "
                                + remedy(setting, "name an interface that has one"
                                         + _candidates(ctx.inventory.netdevs, family, routable=True)))


def _candidates(netdevs: Iterable[Netdev], family: int | None, *, routable: bool = False) -> str:
    """` (up here: eth0, ib0)`: the interfaces NCCL could use (with an address, where addresses were read)."""
    found = []
    for netdev in sorted(netdevs, key=lambda item: natural_key(item.name)):
        if netdev.name == "lo" or netdev.operstate not in _RUNNING:
            continue
        if netdev.addresses is not None:
            usable = [address for address in _usable_addresses(netdev, family)
                      if not (routable and address.version == 6 and address.ip.is_link_local)]
            if not usable:
                continue
        found.append(netdev.name)
    return f" (up here: {listed(found, SHOWN)}; `ip -br addr` shows their addresses)" if found else " (`ip -br addr`)"
