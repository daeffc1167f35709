"""The inventory under construction: one generic merge of facts, and the record of sources.

Each source counts on its own: an HCA named only by `ibstat` still appears. Where two
sources report the same fact differently, the first source's value stands (sources are
applied in the order of trust of `netdoctor.host.sources.SOURCES`) and a `Conflict`
names both sources and values, instead of silently picking one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from netdoctor.errors import ParseError
from netdoctor.host.types import CommandResult, CommandState, NodeSource, SysTree
from netdoctor.inventory.model import Conflict, Hca, Inventory, LinkRate, Port, SourceState, SourceStatus
from netdoctor.logging import get_logger
from netdoctor.util import canonical_pci_address

log = get_logger(__name__)

T = TypeVar("T")


class Draft:
    """The inventory being joined, with the bookkeeping of sources and conflicts."""

    def __init__(self, source: NodeSource) -> None:
        self.source = source
        self.sys: SysTree = source.sys
        self.inventory = Inventory(host=source.host, captured_at=source.captured_at, boot_id=source.boot_id)

    def status(self, name: str, state: SourceState, detail: str = "", duration_s: float | None = None) -> None:
        self.inventory.sources[name] = SourceStatus(name, state, detail, duration_s)

    def merge(self, target: Any, facts: Mapping[str, Any], source: str, subject: str) -> None:
        """Set each `target.attribute` from `source` unless already known; a differing value is a conflict.

        A link rate is combined: width/speed facts the first source lacked are filled in,
        and only a different total rate or width is a conflict.
        """
        for attribute, value in facts.items():
            if value is None:
                continue
            current = getattr(target, attribute)
            if current is None:
                setattr(target, attribute, value)
                continue
            if isinstance(current, LinkRate):
                setattr(target, attribute, _combined_rate(current, value))
                differs = _rates_differ(current, value)
            else:
                differs = current != value
            if differs:
                first = target.sources[0] if getattr(target, "sources", ()) else "earlier source"
                self.inventory.conflicts.append(
                    Conflict(subject, attribute, {first: _shown(current), source: _shown(value)}, chosen=first))

    def parse_command(self, result: CommandResult, parser: Callable[[str], T], *, answer_on_stderr: bool = False) -> T | None:
        """Parse a command's output, recording the source status. Returns None when unusable.

        `answer_on_stderr`: the tool states "nothing found" on stderr with a failure status
        (`fi_info -p efa`: `fi_getinfo: -61 (No data available)`), which its parser reads."""
        name = result.name
        if result.state is CommandState.MISSING:
            self.status(name, SourceState.MISSING, result.describe(), result.duration_s)
            return None
        if result.state is CommandState.TIMEOUT:
            # A snapshot records only that the tool timed out, not after how long.
            detail = f"after {result.duration_s:.1f} s" if result.duration_s > 0 else ""
            self.status(name, SourceState.TIMEOUT, detail, result.duration_s)
            return None
        if result.state is CommandState.TOO_LARGE:
            # Over its row's budget (its stderr says which): a part is never judged as the whole.
            self.status(name, SourceState.TOO_LARGE, result.stderr, result.duration_s)
            return None
        text = result.stdout
        from_stderr = result.state is CommandState.ERROR and not text.strip()
        if from_stderr:
            if not (answer_on_stderr and result.stderr.strip()):
                self.status(name, SourceState.ERROR, result.describe(), result.duration_s)
                return None
            text = result.stderr
        if result.truncated:
            # Cut at the size cap: parse the complete lines, not the half line at the end.
            text = text[: text.rfind("\n") + 1]
        try:
            parsed = parser(text)
        except (ParseError, ValueError) as error:
            # ValueError: a number no int() takes (Python's 4,300-digit limit) in hostile output.
            # A tool that failed AND printed something unparseable is reported as the failure.
            if result.state is CommandState.ERROR:
                self.status(name, SourceState.ERROR, result.describe(), result.duration_s)
            else:
                self.status(name, SourceState.PARSE_ERROR, str(error), result.duration_s)
            log.warning("unparseable tool output", source=name, error=str(error))
            return None
        if from_stderr:
            self.status(name, SourceState.OK, "answered on stderr: " + result.describe().partition(": ")[2],
                        result.duration_s)
        elif result.state is CommandState.ERROR:
            # e.g. ibstat exits 255 after printing good records and an `ibpanic:` line.
            self.status(name, SourceState.ERROR, result.describe() + " (partial output used)", result.duration_s)
        else:
            self.status(name, SourceState.OK, "output truncated at size cap" if result.truncated else "", result.duration_s)
        return parsed

    def hca(self, name: str, source: str) -> Hca:
        """The HCA `name`, added if no source named it yet; `source` is recorded as naming it."""
        hca = self.inventory.hca(name)
        if hca is None:
            hca = Hca(name=name)
            self.inventory.hcas.append(hca)
        seen_by(hca, source)
        return hca

    def port(self, hca: Hca, number: int, source: str) -> Port:
        port = hca.ports.get(number)
        if port is None:
            port = hca.ports[number] = Port(hca=hca.name, number=number)
        seen_by(port, source)
        return port


def seen_by(item: Hca | Port, source: str) -> None:
    """Record that `source` reported `item` (once, in the order the sources came)."""
    if source not in item.sources:
        item.sources += (source,)


def _combined_rate(current: LinkRate, other: LinkRate) -> LinkRate:
    return LinkRate(
        gbps=current.gbps if current.gbps is not None else other.gbps,
        width=current.width or other.width,
        speed=current.speed or other.speed,
        lane_gbps=current.lane_gbps or other.lane_gbps,
    )


def _rates_differ(current: LinkRate, other: LinkRate) -> bool:
    return (other.gbps is not None and current.gbps is not None and abs(other.gbps - current.gbps) > 0.5) or bool(
        other.width and current.width and other.width != current.width)


def _shown(value: Any) -> Any:
    if isinstance(value, LinkRate):
        return value.describe()
    return str(value) if hasattr(value, "value") else value


# -- small value helpers, shared by the readers ----------------------------------------------
def clean(text: str | None) -> str | None:
    if text is None:
        return None
    text = text.strip()
    return text or None


def pci(address: str | None) -> str | None:
    return canonical_pci_address(address) if address else None


def noted(parser: Callable[[str], T], text: str | None, problems: list[str], path: str) -> T | None:
    """`parser(text)`; a malformed value is noted in `problems` and read as unknown."""
    if text is None:
        return None
    try:
        return parser(text)
    except ParseError as error:
        problems.append(f"{path}: {error.message}")
        return None


def quiet(parser: Callable[[str], T], text: str | None) -> T | None:
    """`parser(text)`, or None for a missing or malformed value."""
    if text is None:
        return None
    try:
        return parser(text)
    except ParseError:
        return None
