"""`ibstat` (all forms) parser."""

from __future__ import annotations

import re

from netdoctor.errors import NothingToParse, ParseError
from netdoctor.logging import get_logger
from netdoctor.records import record
from netdoctor.vocabulary import LinkLayer, PhysState, PortState
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
    split_key_value,
)

log = get_logger(__name__)

SOURCE = "ibstat"


@record(frozen=True)
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


@record(frozen=True)
class IbstatCa:
    name: str
    ca_type: str | None = None
    number_of_ports: int | None = None
    firmware: str | None = None
    hardware_version: str | None = None
    node_guid: str | None = None
    sys_image_guid: str | None = None
    ports: tuple[IbstatPort, ...] = ()


@record(frozen=True)
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

    AWS EFA devices print `CA type:`, `Firmware version:` and `Hardware version:` with no
    value (read as None, like a redacted value) and `Link layer: Unknown` (UNSPECIFIED).
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
