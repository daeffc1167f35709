"""`ip -j address show` parser (iproute2 JSON): each interface's state and IP addresses.

NCCL finds the interfaces it bootstraps over through their addresses (getifaddrs), so an
interface that is up without an address is no interface to NCCL; sysfs does not hold
addresses, `ip -j address show` does (CONTRACT 7.2, `commands/ip-j-addr.out`). One array
element per interface, `addr_info` listing its addresses (`[]` for none).
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from netdoctor.errors import ParseError
from netdoctor.parsers.common import require_text
from netdoctor.records import record

SOURCE = "ip-j-addr"
_MAX_INTERFACES = 16384            # a Kubernetes node with thousands of veths stays bounded
_MAX_ADDRESSES = 256               # per interface
_MAX_NAME = 64                     # IFNAMSIZ is 16; altnames up to 128


@record(frozen=True)
class InterfaceAddresses:
    name: str                          # `ibp24s0`
    operstate: str | None              # lower case: up | down | unknown | lowerlayerdown ...
    flags: tuple[str, ...]             # UP, LOWER_UP, LOOPBACK, NO-CARRIER ...
    addresses: tuple[str, ...]         # `10.0.0.1/24`, `fe80::1/64`: ipaddress's canonical text


def _address(info: Any) -> str | None:
    """`{"family": "inet", "local": "10.0.0.1", "prefixlen": 24, ...}` -> `10.0.0.1/24`; None otherwise."""
    if not isinstance(info, dict) or info.get("family") not in ("inet", "inet6"):
        return None
    local, prefix = info.get("local"), info.get("prefixlen")
    if not isinstance(local, str) or isinstance(prefix, bool) or not isinstance(prefix, int):
        return None
    try:
        return str(ipaddress.ip_interface(f"{local[:64]}/{prefix}"))
    except ValueError:
        return None


def parse_ip_addr_json(text: str) -> dict[str, InterfaceAddresses]:
    """`ip -j address show` -> interface name -> its state and addresses (in the tool's order).

    Sample (iproute2 6.1, one interface, trimmed)::

        [{"ifindex":4,"ifname":"eth0","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":1400,
          "operstate":"UP","link_type":"ether","address":"02:fc:00:00:00:01",
          "addr_info":[{"family":"inet","local":"192.0.2.2","prefixlen":24,"scope":"global","label":"eth0"},
                       {"family":"inet6","local":"fe80::fc:ff:fe00:1","prefixlen":64,"scope":"link"}]}]
    """
    require_text(SOURCE, text)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise ParseError(SOURCE, f"not JSON: {str(error)[:120]}") from None
    if not isinstance(data, list):
        raise ParseError(SOURCE, "not a JSON array: not `ip -j address show` output")
    interfaces: dict[str, InterfaceAddresses] = {}
    for entry in data[:_MAX_INTERFACES]:
        if not isinstance(entry, dict) or not isinstance(entry.get("ifname"), str) or not entry["ifname"]:
            continue
        name = entry["ifname"][:_MAX_NAME]
        operstate = entry.get("operstate")
        flags = entry.get("flags") if isinstance(entry.get("flags"), list) else []
        infos = entry.get("addr_info") if isinstance(entry.get("addr_info"), list) else []
        addresses = tuple(dict.fromkeys(address for info in infos[:_MAX_ADDRESSES]
                                        if (address := _address(info)) is not None))
        interfaces.setdefault(name, InterfaceAddresses(
            name, operstate.lower()[:32] if isinstance(operstate, str) else None,
            tuple(flag[:32] for flag in flags[:32] if isinstance(flag, str)), addresses))
    if data and not interfaces:
        raise ParseError(SOURCE, "no interface with an `ifname`: not `ip -j address show` output")
    return interfaces
