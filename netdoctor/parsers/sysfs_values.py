"""Parsers for single sysfs values (`/sys/class/infiniband/*/ports/*/...`, PCIe link files)
and the IB speed table the tool parsers share.

Every function takes the file's text (trailing newline optional: real sysfs has one, some
fixtures do not) and returns a typed value or raises ParseError.
"""

from __future__ import annotations

import functools
import re

from netdoctor.errors import ParseError
from netdoctor.vocabulary import LinkRate, PhysState, PortState
from netdoctor.parsers.common import phys_state_from_text, port_state_from_text

# Per-lane *signalling* rate of each IB speed class, in Gb/s, as iblinkinfo prints it.
IB_SPEED_LANE_GBPS: dict[str, float] = {
    "SDR": 2.5,
    "DDR": 5.0,
    "QDR": 10.0,
    "FDR10": 10.0,
    "FDR": 14.0625,
    "EDR": 25.78125,
    "HDR": 53.125,
    "NDR": 106.25,
    "XDR": 212.5,
}

# Per-lane *data* rate, the one the kernel multiplies by the width for `rate`
# (4X FDR = 56, 4X EDR = 100, 4X NDR = 400). ibv_devinfo `active_speed` prints these.
IB_SPEED_NOMINAL_LANE_GBPS: dict[str, float] = {
    "SDR": 2.5,
    "DDR": 5.0,
    "QDR": 10.0,
    "FDR10": 10.0,
    "FDR": 14.0,
    "EDR": 25.0,
    "HDR": 50.0,
    "NDR": 100.0,
    "XDR": 200.0,
}

_SOURCE = "sysfs"


def _clean(text: str) -> str:
    if not isinstance(text, str):
        raise ParseError(_SOURCE, f"expected text, got {type(text).__name__}")
    return text.strip()


def parse_port_state(text: str) -> PortState:
    """`ports/N/state`: `4: ACTIVE` (also `1: DOWN`, `2: INIT`, `3: ARMED`, `5: ACTIVE_DEFER`)."""
    value = _clean(text)
    if not re.fullmatch(r"\d+:\s*[A-Z_]+", value):
        raise ParseError(_SOURCE, f"port state must look like '4: ACTIVE', got {value[:40]!r}", 1, value)
    return port_state_from_text(_SOURCE, value, 1, value)


def parse_phys_state(text: str) -> PhysState:
    """`ports/N/phys_state`: `5: LinkUp` (also `2: Polling`, `3: Disabled`, `7: Phy Test`, ...).

    A logical state in this file (`4: ACTIVE`, seen in a procfs fixture) is an error, not LinkUp.
    """
    value = _clean(text)
    if not re.fullmatch(r"\d+:\s*[A-Za-z][A-Za-z ]*", value):
        raise ParseError(_SOURCE, f"physical state must look like '5: LinkUp', got {value[:40]!r}", 1, value)
    return phys_state_from_text(_SOURCE, value, 1, value)


_RATE = re.compile(r"(?P<gbps>\d+(?:\.\d+)?)\s*Gb/sec\s*\(\s*(?P<width>\d+)X(?:\s+(?P<speed>[A-Z][A-Z0-9]*))?\s*\)")


def parse_rate(text: str) -> LinkRate:
    """`ports/N/rate`: `400 Gb/sec (4X NDR)`, `200 Gb/sec (2X NDR)`, `10 Gb/sec (4X)`.

    `gbps` is the nominal rate as printed; `lane_gbps` comes from the speed name. Old kernels
    print no name for SDR (`10 Gb/sec (4X)`); then speed and lane_gbps stay None.
    """
    value = _clean(text)
    match = _RATE.fullmatch(value)
    if not match:
        raise ParseError(_SOURCE, f"rate must look like '400 Gb/sec (4X NDR)', got {value[:60]!r}", 1, value)
    speed = match.group("speed")
    if speed is not None and speed not in IB_SPEED_LANE_GBPS:
        raise ParseError(_SOURCE, f"unknown IB speed name {speed!r}", 1, value)
    return LinkRate(
        gbps=float(match.group("gbps")),
        width=int(match.group("width")),
        speed=speed,
        lane_gbps=IB_SPEED_LANE_GBPS[speed] if speed else None,
    )


def parse_counter(text: str) -> int | None:
    """`counters/*`, `hw_counters/*`: a decimal integer; `N/A (no PMA)` (no PMA, e.g. iWARP) -> None."""
    value = _clean(text)
    if value.startswith("N/A"):
        return None
    if not re.fullmatch(r"\d{1,20}", value):
        raise ParseError(_SOURCE, f"counter must be a decimal number or 'N/A (no PMA)', got {value[:40]!r}", 1, value)
    return int(value)


def parse_int(text: str) -> int:
    """A decimal integer file (`mtu`, `speed`, `mlx5_num_vfs`, `carrier_changes`); a leading `-` is allowed."""
    value = _clean(text)
    if not re.fullmatch(r"-?\d{1,20}", value):
        raise ParseError(_SOURCE, f"expected a decimal integer, got {value[:40]!r}", 1, value)
    return int(value)


def parse_numa_node(text: str) -> int | None:
    """`device/numa_node`: `-1` means the platform did not say (single-socket, some VMs) -> None."""
    number = parse_int(text)
    return None if number < 0 else number


_TCLASS = re.compile(r"Global tclass=(?P<value>\d{1,3})\s*(?:#.*)?")


def parse_traffic_class(text: str) -> int | None:
    """MLNX_OFED's `tc/N/traffic_class`: `Global tclass=106` once set (every QP of the port is sent
    with it, NCCL's too), then per-address rule lines, if any; empty while unset -> None. The ToS
    byte: 0..255. Rule lines alone set no global class -> None."""
    lines = _clean(text).splitlines()
    if not lines or not lines[0].startswith("Global"):
        return None
    match = _TCLASS.fullmatch(lines[0].strip())
    if match is None or int(match.group("value")) > 255:
        raise ParseError(_SOURCE, f"traffic_class must start 'Global tclass=106', got {lines[0][:40]!r}", 1, lines[0])
    return int(match.group("value"))


def parse_byte(text: str) -> int:
    """A decimal 0..255 file: rdma_cm's `default_roce_tos` (a ToS byte), `cnp_dscp` (0..63), `cnp_802p_prio` (0..7)."""
    number = parse_int(text)
    if not 0 <= number <= 255:
        raise ParseError(_SOURCE, f"expected 0..255, got {number}", 1, str(number))
    return number


def parse_hex_or_int(text: str) -> int:
    """`lid`/`sm_lid` (`0x1a`) or a decimal value."""
    value = _clean(text)
    if re.fullmatch(r"0[xX][0-9a-fA-F]{1,16}", value):
        return int(value, 16)
    if re.fullmatch(r"\d{1,20}", value):
        return int(value)
    raise ParseError(_SOURCE, f"expected a hex (0x..) or decimal number, got {value[:40]!r}", 1, value)


_PCIE_SPEED = re.compile(r"(?P<gts>\d+(?:\.\d+)?)\s*GT/s(?:\s+PCIe)?")


def parse_pcie_speed(text: str) -> float | None:
    """`current_link_speed`: `32.0 GT/s PCIe`, `16 GT/s`, `8.0 GT/s PCIe`; `Unknown` -> None."""
    value = _clean(text)
    if value.lower().startswith("unknown"):
        return None
    match = _PCIE_SPEED.fullmatch(value)
    if not match:
        raise ParseError(_SOURCE, f"PCIe speed must look like '16.0 GT/s PCIe', got {value[:40]!r}", 1, value)
    return float(match.group("gts"))


_PCIE_GENERATIONS = ((2.5, 1), (5.0, 2), (8.0, 3), (16.0, 4), (32.0, 5), (64.0, 6), (128.0, 7))


def pcie_generation(gts: float) -> int | None:
    """PCIe generation of a transfer rate in GT/s (2.5 -> 1 ... 64 -> 6); None if not a known rate."""
    for rate, generation in _PCIE_GENERATIONS:
        if abs(gts - rate) < 0.01:
            return generation
    return None


def parse_link_width(text: str) -> int | None:
    """`current_link_width`: `16` (or `x16`); 0 means the link is down/untrained -> None."""
    value = _clean(text).lower().removeprefix("x")
    if not re.fullmatch(r"\d{1,3}", value):
        raise ParseError(_SOURCE, f"PCIe link width must be a number like 16, got {text.strip()[:40]!r}", 1, text.strip())
    width = int(value)
    return width or None


@functools.lru_cache(maxsize=64)
def speed_name_from_lane(lane_gbps: float) -> str | None:
    """IB speed class of a per-lane rate, signalling (25.78125) or nominal (25.0). 10 Gb/s -> QDR
    (FDR10 has the same lane rate; tools that know it say so by name)."""
    for table in (IB_SPEED_LANE_GBPS, IB_SPEED_NOMINAL_LANE_GBPS):
        for name, rate in table.items():
            if name != "FDR10" and abs(lane_gbps - rate) < 0.01:
                return name
    return None


def rate_from_lanes(width: int | None, lane_gbps: float | None, speed: str | None = None) -> LinkRate:
    """A LinkRate from width x per-lane speed (iblinkinfo, ibv_devinfo).

    4 x 106.25 -> LinkRate(400, 4, "NDR", 106.25); 4 x 50.0 (ibv_devinfo HDR) -> 200 HDR with
    lane_gbps 53.125, so every source reports the same lane rate for the same link.
    """
    name = speed if speed in IB_SPEED_LANE_GBPS else (speed_name_from_lane(lane_gbps) if lane_gbps else None)
    if name is not None:
        gbps = width * IB_SPEED_NOMINAL_LANE_GBPS[name] if width else None
        return LinkRate(gbps=gbps, width=width, speed=name, lane_gbps=IB_SPEED_LANE_GBPS[name])
    gbps = width * lane_gbps if width and lane_gbps else None
    return LinkRate(gbps=gbps, width=width, speed=None, lane_gbps=lane_gbps)


def pci_id(text: str | None) -> str | None:
    """A PCI `vendor`/`device` file (`0x1d0f`) -> lower-case `0x` + 4 hex digits; None if absent or not one."""
    value = (text or "").strip().lower()
    return value if re.fullmatch(r"0x[0-9a-f]{4}", value) else None


def p2p_providers(text: str) -> tuple[str, ...]:
    """EFA's `p2p` file: the peer-to-peer providers its driver resolved (`NVIDIA`, `NVIDIA peermem`,
    `NEURON`), one per line or comma-separated; empty: none."""
    parts = re.split(r"[\n,]", _clean(text))
    return tuple(part.strip()[:40] for part in parts if part.strip())[:8]
