"""`ibstat` (all forms) and `ibstatus` parsers."""

from __future__ import annotations

import re
from dataclasses import dataclass

import structlog

from netdoctor.errors import NothingToParse, ParseError
from netdoctor.vocabulary import LinkLayer, LinkRate, PhysState, PortState
from netdoctor.parsers.common import (
    find_tool_errors,
    is_paste_noise,
    is_redacted,
    link_layer_from_text,
    normalize_guid,
    numbered_lines,
    parse_decimal,
    parse_hex,
    phys_state_from_text,
    port_state_from_text,
    require_text,
    screen_tool_errors,
    split_key_value,
)
from netdoctor.parsers.sysfs_values import parse_phys_state, parse_port_state, parse_rate

log = structlog.get_logger(__name__)

SOURCE = "ibstat"


@dataclass(frozen=True)
class IbstatPort:
    number: int
    state: PortState | None = None
    phys_state: PhysState | None = None
    rate_gbps: float | None = None    # as printed; a placeholder (10/40) on ports that are not Active
    base_lid: int | None = None
    lmc: int | None = None
    sm_lid: int | None = None
    capability_mask: int | None = None
    port_guid: str | None = None      # `0x` + 16 hex digits
    link_layer: LinkLayer | None = None


@dataclass(frozen=True)
class IbstatCa:
    name: str
    ca_type: str | None = None
    number_of_ports: int | None = None
    firmware: str | None = None
    hardware_version: str | None = None
    node_guid: str | None = None
    sys_image_guid: str | None = None
    ports: tuple[IbstatPort, ...] = ()


@dataclass(frozen=True)
class IbstatOutput:
    """Everything ibstat said: the CA records, and the error lines that followed them.

    ibstat prints good records and then `ibpanic: ... stat of IB device 'mlx5_8' failed`
    (exit 255) when one device vanished; the records before the panic are valid, so they
    are kept and the panic is exposed in `errors`. `ignored` holds trailing junk lines
    (after a blank line following the last record) that were skipped.
    """

    cas: tuple[IbstatCa, ...]
    errors: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()


_CA_HEADER = re.compile(r"^CA:?\s+'(?P<name>[^']+)'\s*$")
_PORT_HEADER = re.compile(r"^Port\s+(?P<number>\d+):\s*$")

_CA_KEYS = {
    "CA type": "ca_type",
    "Number of ports": "number_of_ports",
    "Firmware version": "firmware",
    "Hardware version": "hardware_version",
    "Node GUID": "node_guid",
    "System image GUID": "sys_image_guid",
}
_PORT_KEYS = {
    "State": "state",
    "Physical state": "phys_state",
    "Rate": "rate_gbps",
    "Base lid": "base_lid",
    "LMC": "lmc",
    "SM lid": "sm_lid",
    "Capability mask": "capability_mask",
    "Port GUID": "port_guid",
    "Link layer": "link_layer",
}


def _port_value(field: str, value: str, number: int, line: str) -> object:
    if is_redacted(value):
        return None
    if field == "state":
        return port_state_from_text(SOURCE, value, number, line)
    if field == "phys_state":
        return phys_state_from_text(SOURCE, value, number, line)
    if field == "rate_gbps":
        if not re.fullmatch(r"\d+(?:\.\d+)?", value):
            raise ParseError(SOURCE, f"Rate must be a number of Gb/s, got {value[:40]!r}", number, line)
        return float(value)
    if field in ("base_lid", "lmc", "sm_lid"):
        return parse_decimal(SOURCE, value, number, line)
    if field == "capability_mask":
        return parse_hex(SOURCE, value, number, line)
    if field == "port_guid":
        return normalize_guid(SOURCE, value, number, line)
    return link_layer_from_text(SOURCE, value, number, line)


def _ca_value(field: str, value: str, number: int, line: str) -> object:
    if is_redacted(value):
        return None
    if field == "number_of_ports":
        return parse_decimal(SOURCE, value, number, line)
    if field in ("node_guid", "sys_image_guid"):
        return normalize_guid(SOURCE, value, number, line)
    return value


def parse_ibstat_output(text: str) -> IbstatOutput:
    """Parse `ibstat`, `ibstat <ca> <port>` (`CA: 'x'` + unindented fields) and `ibstat -s`.

    Sample (TAB-indented in raw output, spaces in pastes)::

        CA 'mlx5_0'
                CA type: MT4115
                Number of ports: 1
                Firmware version: 12.23.1020
                Hardware version: 0
                Node GUID: 0xec0d9a03003d677a
                System image GUID: 0xec0d9a03003d677a
                Port 1:
                        State: Active
                        Physical state: LinkUp
                        Rate: 100
                        Base lid: 1
                        LMC: 0
                        SM lid: 1
                        Capability mask: 0x2651e84a
                        Port GUID: 0xec0d9a03003d677a
                        Link layer: InfiniBand
    """
    require_text(SOURCE, text)
    cas: list[IbstatCa] = []
    errors: list[str] = []
    ignored: list[str] = []
    ca_fields: dict[str, object] | None = None
    ports: list[IbstatPort] = []
    port_fields: dict[str, object] | None = None
    blank_after_record = False   # a blank line after a record: what follows may be junk
    in_trailer = False

    def close_port() -> None:
        nonlocal port_fields
        if port_fields is not None:
            ports.append(IbstatPort(**port_fields))  # type: ignore[arg-type]
            port_fields = None

    def close_ca() -> None:
        nonlocal ca_fields, ports
        close_port()
        if ca_fields is not None:
            cas.append(IbstatCa(**ca_fields, ports=tuple(ports)))  # type: ignore[arg-type]
        ca_fields, ports = None, []

    tool_error_lines = {error.line_number for error in find_tool_errors(text)}
    for number, raw in numbered_lines(text):
        line = raw.strip()
        if number in tool_error_lines:
            errors.append(line)
            in_trailer = True
            continue
        if in_trailer:
            if line:
                ignored.append(line)
            continue
        if not line:
            blank_after_record = ca_fields is not None
            continue
        if is_paste_noise(raw):
            continue
        header = _CA_HEADER.match(line)
        if header:
            close_ca()
            ca_fields = {"name": header.group("name")}
            blank_after_record = False
            continue
        if ca_fields is not None:
            port_header = _PORT_HEADER.match(line)
            if port_header:
                close_port()
                port_fields = {"number": int(port_header.group("number"))}
                blank_after_record = False
                continue
            key_value = split_key_value(line)
            if key_value and port_fields is not None and key_value[0] in _PORT_KEYS:
                field = _PORT_KEYS[key_value[0]]
                port_fields[field] = _port_value(field, key_value[1], number, raw)
                blank_after_record = False
                continue
            if key_value and port_fields is None and key_value[0] in _CA_KEYS:
                field = _CA_KEYS[key_value[0]]
                ca_fields[field] = _ca_value(field, key_value[1], number, raw)
                blank_after_record = False
                continue
            if blank_after_record:
                # Trailing junk after the last record (seen: a stray line of GUIDs appended
                # to a paste). Skipped, kept in `ignored`, and logged; a later `CA '...'`
                # header would not be trusted either.
                in_trailer = True
                ignored.append(line)
                log.warning("ibstat.trailing_junk", line_number=number, line=line[:120])
                continue
            if key_value:
                raise ParseError(SOURCE, f"unexpected field {key_value[0][:40]!r} here", number, raw)
        raise ParseError(SOURCE, "line not recognised as ibstat output", number, raw)
    close_ca()
    if not cas:
        if errors:
            raise ParseError(SOURCE, f"tool error: {errors[0]}")
        raise NothingToParse(SOURCE, "no CA records in output")
    return IbstatOutput(cas=tuple(cas), errors=tuple(errors), ignored=tuple(ignored))


def parse_ibstat(text: str) -> list[IbstatCa]:
    """The CA records of `ibstat` output (see parse_ibstat_output for the trailer)."""
    return list(parse_ibstat_output(text).cas)


# --- ibstatus ---------------------------------------------------------------------------

IBSTATUS_SOURCE = "ibstatus"


@dataclass(frozen=True)
class IbstatusPort:
    hca: str
    number: int
    default_gid: str | None = None    # None for `unknown` (Ethernet port whose GID 0 is unreadable)
    base_lid: int | None = None
    sm_lid: int | None = None
    state: PortState | None = None
    phys_state: PhysState | None = None
    rate: LinkRate | None = None
    link_layer: LinkLayer | None = None


_IBSTATUS_HEADER = re.compile(r"^Infiniband device '(?P<hca>[^']+)' port (?P<port>\d+) status:\s*$")
_IBSTATUS_KEYS = {
    "default gid": "default_gid",
    "base lid": "base_lid",
    "sm lid": "sm_lid",
    "state": "state",
    "phys state": "phys_state",
    "rate": "rate",
    "link_layer": "link_layer",
}


def _ibstatus_value(field: str, value: str, number: int, line: str) -> object:
    try:
        if field == "default_gid":
            return None if value.lower() == "unknown" or is_redacted(value) else value
        if field in ("base_lid", "sm_lid"):
            return parse_hex(IBSTATUS_SOURCE, value, number, line)
        if field == "state":
            return parse_port_state(value)
        if field == "phys_state":
            return parse_phys_state(value)
        if field == "rate":
            return parse_rate(value)
        return link_layer_from_text(IBSTATUS_SOURCE, value, number, line)
    except ParseError as error:
        if error.source == IBSTATUS_SOURCE:
            raise
        raise ParseError(IBSTATUS_SOURCE, error.message, number, line) from error


def parse_ibstatus(text: str) -> list[IbstatusPort]:
    """Parse `ibstatus` (a script over sysfs: values are the sysfs strings verbatim).

    Sample::

        Infiniband device 'mlx4_0' port 1 status:
                default gid:     fe80:0000:0000:0000:0002:c903:00a4:e721
                base lid:        0x3
                sm lid:          0x3
                state:           4: ACTIVE
                phys state:      5: LinkUp
                rate:            56 Gb/sec (4X FDR)
                link_layer:      InfiniBand
    """
    require_text(IBSTATUS_SOURCE, text)
    screen_tool_errors(IBSTATUS_SOURCE, text)
    ports: list[IbstatusPort] = []
    fields: dict[str, object] | None = None
    for number, raw in numbered_lines(text):
        line = raw.strip()
        if is_paste_noise(raw):
            continue
        header = _IBSTATUS_HEADER.match(line)
        if header:
            if fields is not None:
                ports.append(IbstatusPort(**fields))  # type: ignore[arg-type]
            fields = {"hca": header.group("hca"), "number": int(header.group("port"))}
            continue
        key_value = split_key_value(line)
        if fields is None or key_value is None or key_value[0] not in _IBSTATUS_KEYS:
            raise ParseError(IBSTATUS_SOURCE, "line not recognised as ibstatus output", number, raw)
        key, value = key_value
        fields[_IBSTATUS_KEYS[key]] = _ibstatus_value(_IBSTATUS_KEYS[key], value, number, raw)
    if fields is not None:
        ports.append(IbstatusPort(**fields))  # type: ignore[arg-type]
    if not ports:
        raise NothingToParse(IBSTATUS_SOURCE, "no port records in output")
    return ports
