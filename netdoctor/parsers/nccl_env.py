"""NCCL's settings as NCCL itself reads them: the environment, then its config files.

Pure: the captured environment and file texts in (`nccl-env.json`, CONTRACT 6.2), typed
settings out. NCCL (src/misc/param.cc `initEnv`) reads `$NCCL_CONF_FILE` when it is set,
else `~/.nccl.conf`, then `/etc/nccl.conf`; each line `NAME=value` is set with setenv(...,
overwrite=0), so the environment wins over the user file, and the user file over
/etc/nccl.conf. Lines starting with `#` and lines without `=` are skipped; NAME is everything
before the first `=` and the value everything after it, with no trimming: `NCCL_IB_HCA =
mlx5_0` sets a variable named `NCCL_IB_HCA ` that NCCL never reads.

Device lists (`NCCL_IB_HCA`, `NCCL_SOCKET_IFNAME`) follow NCCL's `parseStringList` and
`matchIfList`: a leading `^` excludes, then a leading `=` asks for exact names; entries are
comma-separated `name[:port]`, and without `=` an entry is a *prefix* (`mlx5_1` also
selects `mlx5_10` ... `mlx5_17`).

Bounded whatever the input: a device list keeps its first MAX_DEVICE_ENTRIES entries and
counts the rest (NCCL itself reads only its first MAX_IB_DEVS, a few dozen), and the lines
NCCL would not apply are kept up to MAX_IGNORED_LINES and counted past it, so a 100,000-entry
NCCL_IB_HCA costs one linear pass, not 100,000 objects (and findings) downstream.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import field

from netdoctor.errors import ParseError
from netdoctor.records import record
from netdoctor.vocabulary import NCCL_ETC_CONF, nccl_env_kept

# Engineering defaults (not thresholds): what is kept of a hostile or runaway setting.
MAX_DEVICE_ENTRIES = 256
MAX_IGNORED_LINES = 256


@record(frozen=True)
class Setting:
    name: str
    value: str
    origin: str                      # "environment" or the config file's path


@record(frozen=True)
class IgnoredLine:
    """A config-file line NCCL does not apply as its author meant."""

    path: str
    line_number: int
    text: str
    why: str


@record(frozen=True)
class DeviceEntry:
    name: str                        # a prefix unless the list is exact
    port: int | None = None          # `:1`; None: any port


@record(frozen=True)
class DeviceFilter:
    """A parsed `NCCL_IB_HCA` / `NCCL_SOCKET_IFNAME` value."""

    text: str
    exclude: bool                    # leading `^`
    exact: bool                      # `=` after the optional `^`
    entries: tuple[DeviceEntry, ...]
    more: int = 0                    # entries past MAX_DEVICE_ENTRIES, counted, not kept

    @property
    def count(self) -> int:
        """Every entry of the list, kept or not."""
        return len(self.entries) + self.more

    def entry_matches(self, entry: DeviceEntry, name: str, port: int | None = None) -> bool:
        named = name == entry.name if self.exact else name.startswith(entry.name)
        return named and (entry.port is None or port is None or entry.port == port)

    def selects(self, name: str, port: int | None = None) -> bool:
        """Whether NCCL uses this device (port): matched XOR excluded; an empty list matches all."""
        matched = not self.entries or any(self.entry_matches(entry, name, port) for entry in self.entries)
        return matched != self.exclude


@record(frozen=True)
class NcclSettings:
    """The settings in force (name -> Setting), what was captured, and lines NCCL would not apply."""

    settings: dict[str, Setting] = field(default_factory=dict)
    files_read: tuple[str, ...] = ()
    ignored: tuple[IgnoredLine, ...] = ()
    ignored_more: int = 0            # ignored lines past MAX_IGNORED_LINES, counted, not kept
    withheld: tuple[tuple[str, str], ...] = ()   # (path, why): config files not read or not captured

    def get(self, name: str) -> Setting | None:
        return self.settings.get(name)


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_nccl_conf(text: str, path: str = NCCL_ETC_CONF) -> tuple[list[tuple[str, str]], list[IgnoredLine]]:
    """(name, value) pairs in file order as NCCL applies them, and the NCCL lines it would not
    apply (a line that does not name NCCL is never quoted: NCCL_CONF_FILE may name any file)."""
    pairs: list[tuple[str, str]] = []
    ignored: list[IgnoredLine] = []
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw[:-1] if raw.endswith("\r") else raw
        if not line or line.startswith("#"):
            continue
        name, equals, value = line.partition("=")
        if (not equals or not _NAME.match(name)) and "nccl" not in name.lower():
            continue
        if not equals:
            if line.strip():
                ignored.append(IgnoredLine(path, number, line[:200], "no '=': NCCL skips the line"))
            continue
        if not _NAME.match(name):
            why = ("spaces around the name: NCCL sets a variable named " + repr(name) + ", which nothing reads"
                   if _NAME.match(name.strip()) else "not a variable name: NCCL's setting has no effect")
            ignored.append(IgnoredLine(path, number, line[:200], why))
            continue
        pairs.append((name, value))
    return pairs, ignored


def nccl_settings(environ: Mapping[str, str], files: Mapping[str, str], home: str | None = None,
                  withheld: Mapping[str, str] | None = None) -> NcclSettings:
    """The settings NCCL would run with, given the environment and the config files captured.

    `files` maps a path to its text (absent files are not in it). The user file is
    `$NCCL_CONF_FILE` when set and non-empty, else `HOME/.nccl.conf` (HOME from `home`,
    else any captured `*/.nccl.conf`). `withheld` maps a config file that was there but
    not read, or not captured, to why.
    """
    withheld = {} if withheld is None else withheld
    if not isinstance(environ, Mapping) or not isinstance(files, Mapping) or not isinstance(withheld, Mapping):
        raise ParseError("nccl-env", "'environ', 'files' and 'withheld' must be objects")
    if not all(isinstance(path, str) and isinstance(why, str) for path, why in withheld.items()):
        raise ParseError("nccl-env", "'withheld' must map paths to reasons")
    settings: dict[str, Setting] = {}
    for name, value in environ.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise ParseError("nccl-env", f"environment entry {name!r} is not text")
        if nccl_env_kept(name):
            settings[name] = Setting(name, value, "environment")
    user_file = environ.get("NCCL_CONF_FILE") or None
    if user_file is None:
        if home:
            user_file = home.rstrip("/") + "/.nccl.conf"
        else:
            user_file = next((path for path in files if path.endswith("/.nccl.conf")), None)
    order = [path for path in (user_file, NCCL_ETC_CONF) if path is not None]
    ignored: list[IgnoredLine] = []
    read: list[str] = []
    for path in order:
        text = files.get(path)
        if text is None:
            continue
        if not isinstance(text, str):
            raise ParseError("nccl-env", f"file {path!r} is not text")
        read.append(path)
        pairs, skipped = parse_nccl_conf(text, path)
        ignored.extend(skipped)
        for name, value in pairs:
            if nccl_env_kept(name):      # what the environment keeps too: no other line is quoted
                settings.setdefault(name, Setting(name, value, path))     # setenv(..., overwrite=0)
    return NcclSettings(settings, tuple(read), tuple(ignored[:MAX_IGNORED_LINES]),
                        max(0, len(ignored) - MAX_IGNORED_LINES),
                        tuple(sorted(withheld.items()))[:MAX_IGNORED_LINES])


def parse_device_filter(text: str) -> DeviceFilter:
    """`^=mlx5_0:1,mlx5_3` -> exclude, exact, [(mlx5_0, 1), (mlx5_3, any)], as NCCL reads it."""
    rest = text
    exclude = rest.startswith("^")
    if exclude:
        rest = rest[1:]
    exact = rest.startswith("=")
    if exact:
        rest = rest[1:]
    entries = []
    items = rest.split(",", MAX_DEVICE_ENTRIES)        # the rest past the cap stays one string
    tail = items.pop() if len(items) > MAX_DEVICE_ENTRIES else ""
    for item in items:
        name, colon, port = item.partition(":")
        if not name:
            continue
        # NCCL's atoi: leading digits, else 0 (never a real port, so it selects nothing).
        digits = re.match(r"\s*[+-]?\d{1,9}", port) if colon else None
        entries.append(DeviceEntry(name, int(digits.group()) if digits else (0 if colon else None)))
    return DeviceFilter(text, exclude, exact, tuple(entries), len(_NAMED_ENTRY.findall(tail)))


_NAMED_ENTRY = re.compile(r"(?:^|,)[^,:]")     # an entry with a name (`,:1` and `,,` name none)


# -- numbers and names as NCCL reads them ----------------------------------------------------------
# NCCL_PARAM settings (NCCL_IB_DISABLE, NCCL_SHM_DISABLE, NCCL_IB_GID_INDEX, ...) go through
# ncclLoadParam (src/misc/param.cc): an empty value keeps the default, else
# `strtoll(str, nullptr, 0)`, and only an out-of-range value (errno ERANGE) keeps the default.
# glibc's strtoll skips leading white space, takes a sign, then `0x` hex, `0` octal or decimal
# digits, and stops at the first other character without an error: "true" is 0, "1abc" 1,
# " 2" 2, "0x10" 16, "010" 8, "08" 0.
_C_SPACE = " \t\n\v\f\r"
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
# src/graph/topo.cc topoPathTypeStr, the names ncclGetLevel compares with strcmp (case matters),
# LOC..SYS; and levelsOldToNew (src/graph/paths.cc) for the old numeric levels 0..5.
PATH_LEVELS = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")
_OLD_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS", "SYS")


def c_strtoll(text: str) -> tuple[int, bool, str]:
    """C's `strtoll(text, &end, 0)` on glibc: (value, out of range, the text after the number)."""
    rest = text.lstrip(_C_SPACE)
    sign = -1 if rest[:1] == "-" else 1
    if rest[:1] in "+-" and rest:
        rest = rest[1:]
    if rest[:2].lower() == "0x" and rest[2:3] and rest[2:3] in "0123456789abcdefABCDEF":
        base, rest = 16, rest[2:]
        digits = "0123456789abcdefABCDEF"
    elif rest[:1] == "0":
        base, digits = 8, "01234567"
    else:
        base, digits = 10, "0123456789"
    count = 0
    while count < len(rest) and rest[count] in digits:
        count += 1
    if count == 0:
        return 0, False, text            # no conversion: 0, and end points at the start
    value = sign * int(rest[:count], base)
    if value > INT64_MAX:
        return INT64_MAX, True, rest[count:]
    if value < INT64_MIN:
        return INT64_MIN, True, rest[count:]
    return value, False, rest[count:]


def nccl_integer(value: str) -> int | None:
    """An NCCL_PARAM setting as NCCL reads it; None where NCCL keeps its default (empty, out of range)."""
    if not value:
        return None
    number, out_of_range, _ = c_strtoll(value)
    return None if out_of_range else number


def nccl_c_int(value: str) -> int:
    """`(int) strtol(str, NULL, 0)` as ncclGetLevel reads NCCL_P2P_DISABLE: no default, no range
    check, the long cut to 32 bits (4294967297 reads as 1)."""
    number = c_strtoll(value)[0] & 0xFFFFFFFF
    return number - (1 << 32) if number >= 1 << 31 else number


def is_plain_integer(value: str) -> bool:
    """Does NCCL read the whole text as the number a person sees (`1`, `0`, `-1`, `0x10`)?"""
    number, out_of_range, rest = c_strtoll(value)
    return bool(value) and not out_of_range and not rest and value.strip(_C_SPACE) == value


def nccl_path_level(value: str) -> str | None:
    """NCCL_P2P_LEVEL / NCCL_NET_GDR_LEVEL as ncclGetLevel reads them: a path name compared with
    strcmp (`LOC`, not `loc`), else, when the text starts with a digit, an old numeric level
    (0 LOC, 1 PIX, 2 PXB, 3 PHB, 4-5 SYS); None: NCCL ignores the setting."""
    if value in PATH_LEVELS:
        return value
    if value[:1].isdigit() and value[:1].isascii():
        old = nccl_c_int(value)
        return _OLD_LEVELS[min(old, len(_OLD_LEVELS) - 1)] if old >= 0 else None
    return None
