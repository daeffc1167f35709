"""`ibdev2netdev` (also `-v`) and its iproute2 equivalent `rdma link` parser."""

from __future__ import annotations

import re

from netdoctor.errors import NothingToParse, ParseError
from netdoctor.parsers.common import is_paste_noise, numbered_lines, require_text, screen_tool_errors
from netdoctor.records import record

SOURCE = "ibdev2netdev"


@record(frozen=True)
class NetdevMapping:
    """One RDMA port and the netdev bound to it.

    `netdev_up` is the *netdev* operstate from ibdev2netdev `(Up)/(Down)`, not the IB port
    state: IPoIB netdevs of a pure-IB fabric are `(Down)` while their ports are ACTIVE.
    `port_state`/`physical_state` are as printed by `rdma link` (`ACTIVE`, `LINK_UP`) or
    `ibdev2netdev -v` (`ACTIVE`). `netdev` is None for `rdma link` ports without one.
    """

    hca: str
    port: int
    netdev: str | None
    netdev_up: bool | None = None
    port_state: str | None = None
    physical_state: str | None = None
    pci_address: str | None = None    # ibdev2netdev -v only


# `mlx5_0 port 1 ==> ib0 (Up)`; `-v` adds a PCI address, part/board text and `(ACTIVE)`:
# `0000:18:00.0 mlx5_0 (MT4129 - MCX75310AAS-NEAT) ConnectX-7 fw 28.39.1002 port 1 (ACTIVE) ==> ibp24s0 (Down)`
_IBDEV2NETDEV = re.compile(
    r"^(?:(?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+)?"
    r"(?P<hca>[\w.-]+)\s+(?:\([^()]*\)\s+[^=]*?)?port\s+(?P<port>\d+)"
    r"(?:\s+\((?P<state>[A-Z_]+)\))?\s+==>\s+(?P<netdev>\S+)\s+\((?P<up>Up|Down)\)"
    r"(?:\s*#.*)?\s*$"
)
# `link mlx5_0/1 state ACTIVE physical_state LINK_UP netdev ens6f0np0` (more key/value pairs
# such as `subnet_prefix`, `lid`, `sm_lid`, `lmc` appear on IB ports).
_RDMA_LINK = re.compile(r"^link\s+(?P<hca>[\w.-]+)/(?P<port>\d+)(?P<rest>(?:\s.*)?)$")


def parse_ibdev2netdev(text: str) -> list[NetdevMapping]:
    """Parse `ibdev2netdev` lines and/or `rdma link` lines.

    Samples::

        mlx4_0 port 1 ==> eth6 (Up)
        mlx4_0 port 2 ==> eth7 (Down)

        link mlx5_0/1 state ACTIVE physical_state LINK_UP netdev ens6f0np0
    """
    require_text(SOURCE, text)
    screen_tool_errors(SOURCE, text)
    mappings: list[NetdevMapping] = []
    for number, raw in numbered_lines(text):
        line = raw.strip()
        if is_paste_noise(raw) or line.startswith("#"):
            continue
        match = _IBDEV2NETDEV.match(line)
        if match:
            mappings.append(
                NetdevMapping(
                    hca=match.group("hca"),
                    port=int(match.group("port")),
                    netdev=match.group("netdev"),
                    netdev_up=match.group("up") == "Up",
                    port_state=match.group("state"),
                    pci_address=match.group("pci").lower() if match.group("pci") else None,
                )
            )
            continue
        match = _RDMA_LINK.match(line)
        if match and len(match.group("rest").split()) % 2 == 0:
            tokens = match.group("rest").split()
            pairs = dict(zip(tokens[0::2], tokens[1::2], strict=True))
            mappings.append(
                NetdevMapping(
                    hca=match.group("hca"),
                    port=int(match.group("port")),
                    netdev=pairs.get("netdev"),
                    port_state=pairs.get("state"),
                    physical_state=pairs.get("physical_state"),
                )
            )
            continue
        raise ParseError(SOURCE, "line is neither 'DEV port N ==> NETDEV (Up|Down)' nor 'link DEV/N ...'", number, raw)
    if not mappings:
        raise NothingToParse(SOURCE, "no port mappings in output")
    return mappings
