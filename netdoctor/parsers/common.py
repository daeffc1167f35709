"""Helpers every parser shares: line cleanup, paste-noise detection, tool-error screening,
and the IB state / link-layer / GUID vocabularies that several tools print differently.

Pure functions only: text in, values out, `ParseError` on anything not recognised.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator

from netdoctor.errors import NothingToParse, ParseError
from netdoctor.records import record
from netdoctor.vocabulary import LinkLayer, PhysState, PortState

# CSI sequences (ESC [ ... letter): nvidia-smi underlines its header row when stdout is a tty.
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

# Shell prompts that users paste along with the output: `$ ibstat`, `[root@node1 ~]# ibstat`,
# `root@pod:/# rdma link`. A bare `# ` is NOT treated as a prompt: perfquery headers start with it.
_PROMPT = re.compile(
    r"^\s*(?:\$\s+\S"                         # $ cmd
    r"|\[[^\]\n]{1,80}\][#$]\s*\S"           # [user@host dir]# cmd
    r"|[\w.-]{1,64}@[\w.-]{1,64}:[^\n#$]{0,200}[#$]\s*\S)"  # user@host:/path# cmd
)
# User elisions: `...`, `.......`, `[...]`, `…`.
_ELISION = re.compile(r"^\s*(?:\.{3,}|\[\s*\.{3}\s*\]|\u2026)\s*$")
# `bash -x` trace lines.
_TRACE = re.compile(r"^\+{1,3} \S")


def strip_ansi(text: str) -> str:
    """Remove terminal escape sequences (nvidia-smi underlines its header on a tty)."""
    return _ANSI_ESCAPE.sub("", text)


def numbered_lines(text: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, line without CR/LF and without ANSI escapes)."""
    for number, line in enumerate(strip_ansi(text).splitlines(), start=1):
        yield number, line.rstrip("\r")


def is_prompt_line(line: str) -> bool:
    return bool(_PROMPT.match(line))


def is_elision_line(line: str) -> bool:
    return bool(_ELISION.match(line))


def is_trace_line(line: str) -> bool:
    return bool(_TRACE.match(line))


def is_paste_noise(line: str) -> bool:
    """Blank lines, shell prompts, `bash -x` traces and `...` elisions: never data."""
    return not line.strip() or is_prompt_line(line) or is_elision_line(line) or is_trace_line(line)


# --- tool error screening -------------------------------------------------------------

@record(frozen=True)
class ToolError:
    line_number: int
    line: str
    meaning: str


# (pattern, what it means). Matched anywhere in a line, case-sensitive as the tools print them.
_TOOL_ERRORS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^\s*ibpanic:"), "the infiniband-diags tool aborted (ibpanic)"),
    (re.compile(r"umad_open_port|can't open UMAD port|mad_rpc_open_port"),
     "cannot open the UMAD port (ib_umad not loaded, or no permission on /dev/infiniband/umad*)"),
    (re.compile(r"^\s*ibwarn:.*Permission denied"), "permission denied opening the IB device"),
    (re.compile(r"\biberror:"), "the infiniband-diags tool reported an error (iberror)"),
    (re.compile(r"Failed to initialize NVML"), "NVML could not be initialised"),
    (re.compile(r"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"),
     "nvidia-smi cannot talk to the NVIDIA driver"),
    (re.compile(r"^\s*No devices were found\s*$"), "nvidia-smi found no GPUs"),
    (re.compile(r"^\s*(?:Failed to get IB devices list|No IB devices found)"), "libibverbs found no RDMA devices"),
    (re.compile(r"^\s*\S+: (?:line \d+: )?[\w.-]+: command not found\s*$"), "the tool is not installed"),
    (re.compile(r"^\s*Cannot get stats strings information"), "ethtool cannot read the statistics"),
)


# Literal words at least one of which every pattern above needs. Checking them first keeps
# screening cheap on fabric-wide outputs (80k lines) that almost never hold an error.
_TOOL_ERROR_WORDS = ("ibpanic", "UMAD", "umad", "ibwarn", "iberror", "NVML", "NVIDIA-SMI", "No devices",
                     "IB devices", "command not found", "Cannot get stats")


def find_tool_errors(text: str) -> list[ToolError]:
    """Every line that is a known tool error message, in order."""
    found: list[ToolError] = []
    if not any(word in text for word in _TOOL_ERROR_WORDS):
        return found
    for number, line in numbered_lines(text):
        for pattern, meaning in _TOOL_ERRORS:
            if pattern.search(line):
                found.append(ToolError(number, line.strip(), meaning))
                break
    return found


def screen_tool_errors(source: str, text: str) -> None:
    """Raise ParseError naming the tool error if the output carries one.

    Parsers call this before parsing, so "the tool failed" is reported as such instead of
    as a confusing "format not recognised at line 1".
    """
    errors = find_tool_errors(text)
    if errors:
        first = errors[0]
        raise ParseError(source, f"tool error: {first.meaning}: {first.line}", first.line_number, first.line)


def require_text(source: str, text: str) -> None:
    """NothingToParse for empty or whitespace-only output; ParseError for non-text input."""
    if not isinstance(text, str):
        raise ParseError(source, f"expected text, got {type(text).__name__}")
    if not text.strip():
        raise NothingToParse(source, "empty output")


# --- key: value lines ------------------------------------------------------------------

_KEY_VALUE = re.compile(r"^\s*([^:]+?)\s*:\s*(.*?)\s*$")


def split_key_value(line: str) -> tuple[str, str] | None:
    """`\\tRate: 400` -> ("Rate", "400"); None when the line has no colon."""
    match = _KEY_VALUE.match(line)
    if not match:
        return None
    return match.group(1), match.group(2)


def is_redacted(value: str) -> bool:
    """Pastes replace GUIDs/versions by `...` or `xxx`; treat as "not given"."""
    stripped = value.strip()
    return stripped in ("", "...", "..", "…") or bool(re.fullmatch(r"[xX*]{3,}", stripped))


def parse_decimal(source: str, value: str, line_number: int = 0, line: str = "") -> int:
    stripped = value.strip()
    if not re.fullmatch(r"\d{1,20}", stripped):
        raise ParseError(source, f"expected a decimal number, got {stripped[:40]!r}", line_number, line)
    return int(stripped)


def decimal_or_none(value: str | None, max_digits: int = 20) -> int | None:
    """ASCII decimal digits as an int, else None (`str.isdigit` also takes `²`, which int() refuses)."""
    return int(value) if value and len(value) <= max_digits and re.fullmatch(r"[0-9]+", value) else None


def parse_hex(source: str, value: str, line_number: int = 0, line: str = "") -> int:
    stripped = value.strip()
    if not re.fullmatch(r"0[xX][0-9a-fA-F]{1,32}", stripped):
        raise ParseError(source, f"expected a hex number like 0x1a, got {stripped[:40]!r}", line_number, line)
    return int(stripped, 16)


def parse_number(source: str, value: str, line_number: int = 0, line: str = "") -> int:
    """Decimal or `0x` hex."""
    stripped = value.strip()
    if stripped[:2].lower() == "0x":
        return parse_hex(source, stripped, line_number, line)
    return parse_decimal(source, stripped, line_number, line)


# --- GUIDs -------------------------------------------------------------------------------

_GUID_HEX = re.compile(r"0[xX]([0-9a-fA-F]{1,16})")
_GUID_GROUPED = re.compile(r"([0-9a-fA-F]{4}):([0-9a-fA-F]{4}):([0-9a-fA-F]{4}):([0-9a-fA-F]{4})")


def normalize_guid(source: str, value: str, line_number: int = 0, line: str = "") -> str | None:
    """One spelling for GUIDs across tools: `0x` + 16 lower-case hex digits.

    ibstat prints `0xec0d9a03003d677a`, ibv_devinfo `ec0d:9a03:003d:677a`; comparing the two
    is how the inventory joins sources. Redacted values (`...`) give None.
    """
    stripped = value.strip()
    if is_redacted(stripped):
        return None
    match = _GUID_HEX.fullmatch(stripped)
    if match:
        return "0x" + match.group(1).lower().rjust(16, "0")
    match = _GUID_GROUPED.fullmatch(stripped)
    if match:
        return "0x" + "".join(match.groups()).lower()
    raise ParseError(source, f"not a GUID: {stripped[:40]!r}", line_number, line)


# --- IB state vocabularies ---------------------------------------------------------------
# Each tool spells the same states differently: sysfs `4: ACTIVE`, ibstat `Active`,
# ibv_devinfo `PORT_ACTIVE (4)`, iblinkinfo `Active`, rdma `ACTIVE`; ibstat says
# `Initializing`, iblinkinfo `Initialize`, sysfs `INIT`.

_PORT_STATE_NAMES: dict[str, PortState] = {
    "DOWN": PortState.DOWN,
    "INIT": PortState.INIT,
    "INITIALIZE": PortState.INIT,
    "INITIALIZING": PortState.INIT,
    "ARMED": PortState.ARMED,
    "ACTIVE": PortState.ACTIVE,
    "ACTIVEDEFER": PortState.ACTIVE_DEFER,
}
_PORT_STATE_NUMBERS: dict[int, PortState] = {
    1: PortState.DOWN, 2: PortState.INIT, 3: PortState.ARMED, 4: PortState.ACTIVE, 5: PortState.ACTIVE_DEFER,
}
_PHYS_STATE_NAMES: dict[str, PhysState] = {
    "SLEEP": PhysState.SLEEP,
    "POLLING": PhysState.POLLING,
    "DISABLED": PhysState.DISABLED,
    "PORTCONFIGURATIONTRAINING": PhysState.TRAINING,
    "LINKUP": PhysState.LINK_UP,
    "LINKERRORRECOVERY": PhysState.LINK_ERROR_RECOVERY,
    "PHYTEST": PhysState.PHY_TEST,
}
_PHYS_STATE_NUMBERS: dict[int, PhysState] = {
    1: PhysState.SLEEP, 2: PhysState.POLLING, 3: PhysState.DISABLED, 4: PhysState.TRAINING,
    5: PhysState.LINK_UP, 6: PhysState.LINK_ERROR_RECOVERY, 7: PhysState.PHY_TEST,
}

_ENUM_WITH_NUMBER = re.compile(r"^\s*(?P<name>[A-Za-z_][A-Za-z_ ]*?)\s*\(\s*(?P<number>\d+)\s*\)\s*$")
_NUMBER_COLON_NAME = re.compile(r"^\s*(?P<number>\d+)\s*:\s*(?P<name>[A-Za-z_][A-Za-z_ ]*?)\s*$")


def _name_key(name: str) -> str:
    key = re.sub(r"[^A-Z]", "", name.upper())
    return key[4:] if key.startswith("PORT") and key != "PORTCONFIGURATIONTRAINING" else key


def _split_state(text: str) -> tuple[str, int | None]:
    """`PORT_ACTIVE (4)` / `4: ACTIVE` / `Active` -> (name, number or None)."""
    match = _ENUM_WITH_NUMBER.match(text) or _NUMBER_COLON_NAME.match(text)
    if match:
        return match.group("name"), int(match.group("number"))
    return text.strip(), None


@functools.lru_cache(maxsize=256)
def _lookup_port_state(text: str) -> PortState | str:
    """PortState, or the reason it is not one (cached: fabric outputs repeat a few spellings)."""
    name, number = _split_state(text)
    state = _PORT_STATE_NAMES.get(_name_key(name))
    if state is None:
        return "unknown logical port state"
    if number is not None and _PORT_STATE_NUMBERS.get(number) is not state:
        return "port state name and number disagree in"
    return state


@functools.lru_cache(maxsize=256)
def _lookup_phys_state(text: str) -> PhysState | str:
    name, number = _split_state(text)
    state = _PHYS_STATE_NAMES.get(re.sub(r"[^A-Z]", "", name.upper()))
    if state is None:
        return "unknown physical port state"
    if number is not None and _PHYS_STATE_NUMBERS.get(number) is not state:
        return "physical state name and number disagree in"
    return state


def port_state_from_text(source: str, text: str, line_number: int = 0, line: str = "") -> PortState:
    """Any tool's spelling of the logical port state -> PortState; name and number must agree."""
    state = _lookup_port_state(text)
    if isinstance(state, PortState):
        return state
    raise ParseError(source, f"{state} {text.strip()[:40]!r}", line_number, line)


def phys_state_from_text(source: str, text: str, line_number: int = 0, line: str = "") -> PhysState:
    """Any tool's spelling of the physical port state -> PhysState; name and number must agree."""
    state = _lookup_phys_state(text)
    if isinstance(state, PhysState):
        return state
    raise ParseError(source, f"{state} {text.strip()[:40]!r}", line_number, line)


def link_layer_from_text(source: str, text: str, line_number: int = 0, line: str = "") -> LinkLayer:
    key = text.strip().lower()
    if key == "infiniband":
        return LinkLayer.INFINIBAND
    if key == "ethernet":
        return LinkLayer.ETHERNET
    if key in ("unspecified", "unknown"):
        return LinkLayer.UNSPECIFIED
    raise ParseError(source, f"unknown link layer {text.strip()[:40]!r}", line_number, line)
