"""libfabric's `fi_info -p efa` (the providers it sees) and `fi_info --version` parsers.

On AWS, `fi_info -p efa` lists one record per EFA device and endpoint type; an instance
without a working EFA (no device, no driver, libfabric without the provider) makes
fi_getinfo fail with -FI_ENODATA, which fi_info prints on stderr as `fi_getinfo: -61`
(newer libfabric appends `(No data available)`). That is an answer, not a broken output:
`parse_fi_info` returns no providers for it.
"""

from __future__ import annotations

import re

from netdoctor.errors import NothingToParse, ParseError
from netdoctor.parsers.common import is_paste_noise, numbered_lines, require_text, split_key_value
from netdoctor.records import record

SOURCE = "fi_info"


@record(frozen=True)
class FiProvider:
    """One record of `fi_info`'s short listing (util/info.c print_short_info)."""

    provider: str                 # efa, cxi, tcp;ofi_rxm, ...
    fabric: str | None            # efa, efa-direct, or `EFA-fe80::...` on older libfabric
    domain: str | None            # rdmap16s27-rdm, efa_0-rdm, rdmap47s0-dgrm
    version: str | None           # the provider's version, `111.20`
    ep_type: str | None           # FI_EP_RDM, FI_EP_DGRAM
    protocol: str | None          # FI_PROTO_EFA


# fi_info prints `fi_getinfo: %d` (newer: `fi_getinfo: %d (%s)`) when fi_getinfo fails.
_GETINFO_ERROR = re.compile(r"^\s*(?:fi_getinfo|fi_info): (-\d+)(?: \((?P<reason>[^()]*)\))?\s*$")
_NO_DATA = -61   # -FI_ENODATA: no provider matched
_FIELDS = {"fabric": "fabric", "domain": "domain", "version": "version", "type": "ep_type", "protocol": "protocol"}
_VALUES = {
    "version": re.compile(r"\d+\.\d+"),
    "ep_type": re.compile(r"FI_EP_\w+"),
    "protocol": re.compile(r"FI_PROTO_\w+"),
}


def _value(field: str, value: str, number: int, line: str) -> str | None:
    if value in ("", "(null)"):
        return None
    pattern = _VALUES.get(field)
    if pattern is not None and not pattern.fullmatch(value):
        raise ParseError(SOURCE, f"unexpected {field} {value[:40]!r}", number, line)
    return value


def parse_fi_info(text: str) -> list[FiProvider]:
    """The provider records of `fi_info -p efa` (any provider); [] when fi_getinfo found none.

    Sample (p4d.24xlarge, 4 EFA devices; provider unindented, fields indented by 4)::

        provider: efa
            fabric: efa
            domain: rdmap16s27-rdm
            version: 111.20
            type: FI_EP_RDM
            protocol: FI_PROTO_EFA

    `fi_getinfo: -61` (or `fi_getinfo: -61 (No data available)`) gives []; any other
    fi_getinfo error is a ParseError naming it. Indentation is not relied on (pastes lose
    it); a field before any `provider:` line, a field given twice in one record, or a line
    that is none of these is a ParseError.
    """
    require_text(SOURCE, text)
    providers: list[FiProvider] = []
    record: dict[str, str | None] | None = None
    no_data = False

    def close() -> None:
        nonlocal record
        if record is not None:
            providers.append(FiProvider(**record))  # type: ignore[arg-type]
        record = None

    for number, raw in numbered_lines(text):
        if is_paste_noise(raw):
            continue
        error = _GETINFO_ERROR.match(raw)
        if error:
            if int(error[1]) != _NO_DATA:
                reason = f" ({error['reason']})" if error["reason"] else ""
                raise ParseError(SOURCE, f"tool error: fi_getinfo failed with {error[1]}{reason}", number, raw)
            no_data = True
            continue
        key_value = split_key_value(raw)
        if key_value is None:
            raise ParseError(SOURCE, "line not recognised as fi_info output", number, raw)
        key, value = key_value
        if key == "provider":
            close()
            if not value:
                raise ParseError(SOURCE, "provider without a name", number, raw)
            record = dict.fromkeys(_FIELDS.values())
            record["provider"] = value
            continue
        field = _FIELDS.get(key)
        if field is None:
            raise ParseError(SOURCE, f"unexpected field {key[:40]!r}", number, raw)
        if record is None:
            raise ParseError(SOURCE, f"{key!r} before any 'provider:' line", number, raw)
        if record[field] is not None:
            raise ParseError(SOURCE, f"{key!r} given twice in one record", number, raw)
        record[field] = _value(field, value, number, raw)
    close()
    if no_data:
        if providers:
            raise ParseError(SOURCE, "provider records and 'fi_getinfo: -61' (no data) in one output")
        return []
    if not providers:
        raise NothingToParse(SOURCE, "no provider records in output")
    return providers


_VERSION_LINE = re.compile(r"^libfabric: (\S+)$")
_PROGRAM_LINE = re.compile(r"^\S*fi_info: \S+$")
_API_LINE = re.compile(r"^libfabric api: \d+\.\d+$")


def parse_fi_info_version(text: str) -> str:
    """The libfabric version of `fi_info --version` (util/info.c)::

        fi_info: 1.22.0amzn4.0
        libfabric: 1.22.0amzn4.0
        libfabric api: 1.22

    Returns the `libfabric:` line's version (the library loaded, which is what providers
    and aws-ofi-nccl run on), not the fi_info binary's own (the first line, prefixed by
    argv[0]: `/opt/amazon/efa/bin/fi_info: ...` when run by path).
    """
    require_text(SOURCE, text)
    version: str | None = None
    for number, raw in numbered_lines(text):
        if is_paste_noise(raw):
            continue
        line = raw.strip()
        match = _VERSION_LINE.match(line)
        if match:
            if version is not None:
                raise ParseError(SOURCE, "two 'libfabric:' lines", number, raw)
            version = match[1]
            continue
        if _PROGRAM_LINE.match(line) or _API_LINE.match(line):
            continue
        raise ParseError(SOURCE, "line not recognised as 'fi_info --version' output", number, raw)
    if version is None:
        raise NothingToParse(SOURCE, "no 'libfabric:' line in output")
    return version
