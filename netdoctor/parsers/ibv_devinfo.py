"""`ibv_devinfo` and `ibv_devinfo -v` parser."""

from __future__ import annotations

import re

from netdoctor.errors import NothingToParse, ParseError
from netdoctor.records import record
from netdoctor.vocabulary import LinkLayer, LinkRate, PhysState, PortState
from netdoctor.parsers.common import (
    is_paste_noise,
    is_redacted,
    link_layer_from_text,
    normalize_guid,
    numbered_lines,
    parse_decimal,
    parse_number,
    phys_state_from_text,
    port_state_from_text,
    require_text,
    screen_tool_errors,
)
from netdoctor.parsers.sysfs_values import rate_from_lanes

SOURCE = "ibv_devinfo"


@record(frozen=True)
class IbvPort:
    number: int
    state: PortState | None = None
    phys_state: PhysState | None = None     # only with -v
    max_mtu: int | None = None              # bytes
    active_mtu: int | None = None           # bytes
    sm_lid: int | None = None
    port_lid: int | None = None
    lmc: int | None = None
    link_layer: LinkLayer | None = None     # missing in old libibverbs
    active_width: int | None = None         # lanes (4 for `4X (2)`); only with -v
    active_speed_gbps: float | None = None  # per lane, as printed (`50.0 Gbps (64)` -> 50.0)
    active_speed: str | None = None         # speed class from the enum number (64 -> HDR)
    rate: LinkRate | None = None            # width x lane speed
    port_cap_flags: int | None = None
    gids: tuple[tuple[int, str, str | None], ...] = ()   # (index, gid, "RoCE v2" or None)


@record(frozen=True)
class IbvDevice:
    hca_id: str
    transport: str | None = None
    firmware: str | None = None
    node_guid: str | None = None            # normalised `0x` + 16 hex
    sys_image_guid: str | None = None
    vendor_id: int | None = None
    vendor_part_id: int | None = None
    hardware_version: str | None = None
    board_id: str | None = None
    phys_port_cnt: int | None = None
    ports: tuple[IbvPort, ...] = ()


_HCA_ID = re.compile(r"^hca_id:\s*(?P<name>\S+)\s*$")
_PORT = re.compile(r"^port:\s*(?P<number>\d+)\s*$")
_GID = re.compile(r"^GID\[\s*(?P<index>\d+)\]:\s*(?P<gid>[0-9A-Fa-f:.]+)(?:\s*,\s*(?P<kind>.+?))?\s*$")
_KEY = re.compile(r"^(?P<key>[a-z_0-9]+):\s*(?P<value>.*?)\s*$")
_ENUM = re.compile(r"^(?P<value>\S+)(?:\s+Gbps)?\s*\((?P<number>\d+)\)$")

_MTU_BY_ENUM = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}
# ibv_port_attr.active_speed enum -> speed class (libibverbs).
_SPEED_BY_ENUM = {1: "SDR", 2: "DDR", 4: "QDR", 8: "FDR10", 16: "FDR", 32: "EDR", 64: "HDR", 128: "NDR", 256: "XDR"}


def _mtu(value: str, number: int, line: str) -> int:
    """`4096 (5)` -> 4096 bytes; the enum number must agree."""
    match = _ENUM.match(value)
    if not match or not match.group("value").isdigit():
        raise ParseError(SOURCE, f"MTU must look like '4096 (5)', got {value[:40]!r}", number, line)
    size = int(match.group("value"))
    if _MTU_BY_ENUM.get(int(match.group("number"))) != size:
        raise ParseError(SOURCE, f"MTU {size} does not match its enum ({match.group('number')})", number, line)
    return size


def _width(value: str, number: int, line: str) -> int | None:
    match = re.fullmatch(r"(\d+)X\s*\((\d+)\)", value)
    if match:
        return int(match.group(1))
    if re.fullmatch(r"invalid width.*", value, re.IGNORECASE):
        return None
    raise ParseError(SOURCE, f"active_width must look like '4X (2)', got {value[:40]!r}", number, line)


def _speed(value: str, number: int, line: str) -> tuple[float | None, str | None]:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*Gbps\s*\((\d+)\)", value)
    if match:
        return float(match.group(1)), _SPEED_BY_ENUM.get(int(match.group(2)))
    if re.fullmatch(r"invalid speed.*", value, re.IGNORECASE):
        return None, None
    raise ParseError(SOURCE, f"active_speed must look like '25.0 Gbps (32)', got {value[:40]!r}", number, line)


def parse_ibv_devinfo(text: str) -> list[IbvDevice]:
    """Parse `ibv_devinfo` or `ibv_devinfo -v`.

    Sample (TAB-separated)::

        hca_id:	mlx4_1
        	transport:			InfiniBand (0)
        	fw_ver:				2.42.5000
        	node_guid:			7cfe:9003:00a5:95c0
        	sys_image_guid:			7cfe:9003:00a5:95c3
        	vendor_id:			0x02c9
        	vendor_part_id:			4099
        	hw_ver:				0x1
        	board_id:			MT_1090120019
        	phys_port_cnt:			2
        	Device ports:
        		port:	1
        			state:			PORT_ACTIVE (4)
        			max_mtu:		4096 (5)
        			active_mtu:		4096 (5)
        			sm_lid:			1
        			port_lid:		22
        			port_lmc:		0x00
        			link_layer:		InfiniBand

    With -v the device block also lists capabilities (continuation lines, `Unknown flags`,
    ODP blocks, ...): those are skipped. Once a `port:` line is seen, every key until the
    next `port:`/`hca_id:` belongs to that port (ibv_devinfo prints ports last), which is
    why indentation is not relied on (it is not stable across versions and pastes).

    AWS EFA devices say `transport: unspecified (4)` (kept as `unspecified`), `fw_ver: 0.0.0.0`
    (kept as printed), vendor 0x1d0f, and `link_layer: Unspecified` (`InfiniBand` with older
    rdma-core).
    """
    require_text(SOURCE, text)
    screen_tool_errors(SOURCE, text)
    devices: list[IbvDevice] = []
    device: dict[str, object] | None = None
    ports: list[IbvPort] = []
    port: dict[str, object] | None = None
    gids: list[tuple[int, str, str | None]] = []

    def close_port() -> None:
        nonlocal port, gids
        if port is not None:
            width, lane, speed = port.pop("_width", None), port.pop("_lane", None), port.pop("_speed", None)
            if width is not None or lane is not None:
                port["rate"] = rate_from_lanes(width, lane, speed)  # type: ignore[arg-type]
            ports.append(IbvPort(**port, gids=tuple(gids)))  # type: ignore[arg-type]
        port, gids = None, []

    def close_device() -> None:
        nonlocal device, ports
        close_port()
        if device is not None:
            devices.append(IbvDevice(**device, ports=tuple(ports)))  # type: ignore[arg-type]
        device, ports = None, []

    for number, raw in numbered_lines(text):
        line = raw.strip()
        if is_paste_noise(raw):
            continue
        match = _HCA_ID.match(line)
        if match:
            close_device()
            device = {"hca_id": match.group("name")}
            continue
        if device is None:
            raise ParseError(SOURCE, "expected 'hca_id:' before any device field", number, raw)
        match = _PORT.match(line)
        if match:
            close_port()
            port = {"number": int(match.group("number"))}
            continue
        if port is not None:
            gid = _GID.match(line)
            if gid:
                gids.append((int(gid.group("index")), gid.group("gid"), gid.group("kind")))
                continue
            key_match = _KEY.match(line)
            if key_match:
                _port_field(port, key_match.group("key"), key_match.group("value"), number, raw)
            # other lines inside a port block (-v flag lists) carry nothing we use
            continue
        key_match = _KEY.match(line)
        if key_match:
            _device_field(device, key_match.group("key"), key_match.group("value"), number, raw)
        # -v capability continuation lines, `Device ports:`, `tag matching not supported`: skipped
    close_device()
    if not devices:
        raise NothingToParse(SOURCE, "no hca_id records in output")
    return devices


def _device_field(device: dict[str, object], key: str, value: str, number: int, line: str) -> None:
    if is_redacted(value):
        return
    if key == "transport":
        device["transport"] = re.sub(r"\s*\(\d+\)$", "", value)
    elif key == "fw_ver":
        device["firmware"] = value
    elif key in ("node_guid", "sys_image_guid"):
        device[key] = normalize_guid(SOURCE, value, number, line)
    elif key == "vendor_id":
        device["vendor_id"] = parse_number(SOURCE, value, number, line)
    elif key == "vendor_part_id":
        device["vendor_part_id"] = parse_decimal(SOURCE, value, number, line)
    elif key == "hw_ver":
        device["hardware_version"] = value
    elif key == "board_id":
        device["board_id"] = value
    elif key == "phys_port_cnt":
        device["phys_port_cnt"] = parse_decimal(SOURCE, value, number, line)


def _port_field(port: dict[str, object], key: str, value: str, number: int, line: str) -> None:
    if key == "state":
        port["state"] = port_state_from_text(SOURCE, value, number, line)
    elif key == "phys_state":
        port["phys_state"] = phys_state_from_text(SOURCE, value, number, line)
    elif key in ("max_mtu", "active_mtu"):
        port[key] = _mtu(value, number, line)
    elif key == "sm_lid":
        port["sm_lid"] = parse_decimal(SOURCE, value, number, line)
    elif key == "port_lid":
        port["port_lid"] = parse_decimal(SOURCE, value, number, line)
    elif key == "port_lmc":
        port["lmc"] = parse_number(SOURCE, value, number, line)
    elif key == "link_layer":
        port["link_layer"] = link_layer_from_text(SOURCE, value, number, line)
    elif key == "port_cap_flags":
        port["port_cap_flags"] = parse_number(SOURCE, value, number, line)
    elif key == "active_width":
        width = _width(value, number, line)
        port["active_width"] = port["_width"] = width
    elif key == "active_speed":
        lane, speed = _speed(value, number, line)
        port["active_speed_gbps"] = port["_lane"] = lane
        port["active_speed"] = port["_speed"] = speed
