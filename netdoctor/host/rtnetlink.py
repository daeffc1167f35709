"""One RTM_GETLINK dump over a NETLINK_ROUTE socket, with the standard library alone.

netdoctor needs five facts per interface from the kernel (name, MTU, operstate, hardware
address, ARP type) once per run. pyroute2 gave them, but importing it took 0.11 s on the
2-core VM and 0.21 s of a live `check` on the H200 device, on discovery's main path
(benchmarks/results/check.md); the dump itself is ~3 ms. The wire format is the kernel's ABI
(rtnetlink(7), netlink(7), include/uapi/linux/{netlink,rtnetlink,if_link}.h): a request
`nlmsghdr` + `ifinfomsg`, answered by RTM_NEWLINK messages, each `ifinfomsg` followed by
`rtattr`s, until NLMSG_DONE.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import time
from typing import Any

NETLINK_ROUTE = 0
RTM_NEWLINK, RTM_GETLINK = 16, 18
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU, IFLA_OPERSTATE = 1, 3, 4, 16
# include/uapi/linux/if.h, enum IF_OPER_*: the names `ip link` (and pyroute2) print.
OPERSTATES = ("UNKNOWN", "NOTPRESENT", "DOWN", "LOWERLAYERDOWN", "TESTING", "DORMANT", "UP")
_HEADER = struct.Struct("=IHHII")         # nlmsghdr: length, type, flags, sequence, port id
_IFINFO = struct.Struct("=BxHiII")        # ifinfomsg: family, pad, type, index, flags, change
_ATTRIBUTE = struct.Struct("=HH")         # rtattr: length, type
_NLA_TYPE_MASK = 0x3FFF                   # without NLA_F_NESTED / NLA_F_NET_BYTEORDER
# A dump of a few hundred interfaces is a few hundred KiB; past this it is not trusted (engineering default).
MAX_DUMP_BYTES = 64 * 1024 * 1024


def dump_links(timeout_s: float) -> list[dict[str, Any]]:
    """Every interface of this network namespace: name, mtu, operstate (`UP`), mac
    (`aa:bb:..`, any length), arp_type. Raises OSError (TimeoutError after `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    sequence = int(time.monotonic_ns() & 0x7FFFFFFF) or 1
    request = _HEADER.pack(_HEADER.size + _IFINFO.size, RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, sequence, 0)
    request += _IFINFO.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
    links: list[dict[str, Any]] = []
    received = 0
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_ROUTE) as channel:
        channel.bind((0, 0))
        channel.settimeout(timeout_s)
        channel.sendto(request, (0, 0))
        while True:
            channel.settimeout(max(0.001, deadline - time.monotonic()))
            data = channel.recv(1 << 16)
            received += len(data)
            if not data or received > MAX_DUMP_BYTES:
                raise OSError(errno.EMSGSIZE, "netlink dump ended early or grew past its budget")
            if _parse_messages(data, sequence, links):
                return links


def _parse_messages(data: bytes, sequence: int, links: list[dict[str, Any]]) -> bool:
    """Add the RTM_NEWLINK messages of one datagram to `links`; True once NLMSG_DONE came."""
    offset = 0
    while offset + _HEADER.size <= len(data):
        length, kind, _flags, seq, _port = _HEADER.unpack_from(data, offset)
        if length < _HEADER.size or offset + length > len(data):
            raise OSError(errno.EBADMSG, f"malformed netlink message (length {length})")
        if seq == sequence:
            if kind == NLMSG_DONE:
                return True
            if kind == NLMSG_ERROR:
                code = -struct.unpack_from("=i", data, offset + _HEADER.size)[0]
                raise OSError(code, os.strerror(code))
            if kind == RTM_NEWLINK:
                links.append(_link(data, offset + _HEADER.size, offset + length))
        offset += (length + 3) & ~3
    return False


def _link(data: bytes, start: int, end: int) -> dict[str, Any]:
    _family, arp_type, _index, _flags, _change = _IFINFO.unpack_from(data, start)
    link: dict[str, Any] = {"name": None, "mtu": None, "operstate": None, "mac": None, "arp_type": arp_type}
    offset = start + _IFINFO.size
    while offset + _ATTRIBUTE.size <= end:
        length, kind = _ATTRIBUTE.unpack_from(data, offset)
        if length < _ATTRIBUTE.size or offset + length > end:
            break
        value = data[offset + _ATTRIBUTE.size:offset + length]
        kind &= _NLA_TYPE_MASK
        if kind == IFLA_IFNAME:
            link["name"] = value.split(b"\0", 1)[0].decode("utf-8", "replace")
        elif kind == IFLA_MTU and len(value) >= 4:
            link["mtu"] = struct.unpack_from("=I", value)[0]
        elif kind == IFLA_OPERSTATE and value:
            link["operstate"] = OPERSTATES[value[0]] if value[0] < len(OPERSTATES) else str(value[0])
        elif kind == IFLA_ADDRESS and value:
            link["mac"] = ":".join(f"{byte:02x}" for byte in value)
        offset += (length + 3) & ~3
    return link
