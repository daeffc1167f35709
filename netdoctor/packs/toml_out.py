"""A loaded rule pack written back as TOML (`netdoctor rules`): tomllib only reads."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from netdoctor.errors import RulesError
from netdoctor.packs.model import STRUCTURE_TABLES, RulePack


def pack_toml(pack: RulePack) -> str:
    """The merged pack as TOML, with where it came from in a header comment."""
    lines = [
        f"# rule pack: {pack.name}",
        f"# selected: {pack.selection_reason}",
        *(f"# file: {path}" for path in pack.files),
        "",
    ]
    ordered = [key for key in STRUCTURE_TABLES if key in pack.data]
    ordered += [key for key in pack.data if key not in STRUCTURE_TABLES]
    body = _toml_tables(pack.data, ordered, prefix=())
    return "\n".join(lines) + body


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else _toml_string(key)


def _toml_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"'


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(key)} = {_toml_value(item)}" for key, item in value.items()) + "}"
    raise RulesError(f"cannot write {type(value).__name__} value {value!r} as TOML")


def _toml_tables(table: Mapping[str, Any], keys: list[str], prefix: tuple[str, ...]) -> str:
    out: list[str] = []
    for key in keys:
        value = table[key]
        if not isinstance(value, dict):
            continue
        path = (*prefix, key)
        scalars = {name: item for name, item in value.items() if not isinstance(item, dict)}
        tables = [name for name, item in value.items() if isinstance(item, dict)]
        if scalars or not tables:
            out.append(f"[{'.'.join(_toml_key(part) for part in path)}]")
            out.extend(f"{_toml_key(name)} = {_toml_value(item)}" for name, item in scalars.items())
            out.append("")
        if tables:
            out.append(_toml_tables(value, tables, path))
    return "\n".join(out)
