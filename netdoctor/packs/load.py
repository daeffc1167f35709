"""Reading rule packs: TOML, the `extends` chain, merging, validation, site overrides.

A pack is a TOML file (see docs/rules.md). Bundled packs live in the `netdoctor_rules`
package; one may `extends` another (a bundled name or a path relative to it), and every
pack stands on the default pack. A site override file is deep-merged over the chosen pack,
but may only change keys the pack already has (a typo guard), add `[port-classes.*]`
tables and change `[grade]` lists.
"""

from __future__ import annotations

import copy
import importlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

try:
    import tomllib  # novermin: guarded, 3.10 takes the except branch
except ModuleNotFoundError:      # Python 3.10: the backport tomllib was made from (same API)
    import tomli as tomllib  # type: ignore[no-redef]

from netdoctor.errors import RulesError
from netdoctor.host.files import read_regular
from netdoctor.host.trust import running_as_root, unsafe_path_reason
from netdoctor.logging import get_logger
from netdoctor.packs.model import ROLES, STRUCTURE_TABLES, PortClass, RulePack
from netdoctor.vocabulary import LinkLayer

log = get_logger(__name__)

RULES_PACKAGE = "netdoctor_rules"
DEFAULT_PACK = "default"
SYSTEM_SITE_PATH = Path("/etc/netdoctor/rules.toml")
SITE_ENV_VAR = "NETDOCTOR_RULES"
# A rule pack is a page of TOML; anything near this size is not one.
MAX_PACK_BYTES = 1 << 20
# Settings a check no longer reads: a pack or site file that still sets one loads, with a
# deprecation line in the log, instead of failing the typo guard. Section -> key -> why.
RETIRED_SETTINGS: dict[str, dict[str, str]] = {
    "pcie-link": {
        "power_saving_min_pstate": "GPU link speed is judged by NVML utilization (busy_min_utilization), "
                                   "not the P-state (Hopper idles in P0)",
        "unknown_pstate_severity": "a GPU below its max gen with unknown load is power saving (pass)",
    },
    "nvlink": {
        "judged_counters": "replay/recovery are judged by growth, CRC by rate per second (crc_per_second_fail)",
        "error_growth_per_hour_warn": "any replay/recovery growth warns, as DCGM's NVLink health watch counts it",
        "error_growth_per_hour_fail": "replaced by replay_per_hour_fail and recovery_per_hour_fail",
        "error_level_warn": "with no earlier reading the count is judged as a rate over the uptime",
    },
}

PORT_CLASS_FIELDS = {
    "description": str,
    "link_layer": str,
    "hca_types": list,
    "hca_names": list,
    "role": str,
    "expected_rate_gbps": (int, float),
    "expected_width": int,
    "near_gpu": bool,
    "switch_management": bool,
}
MATCH_FIELDS: dict[str, type | tuple[type, ...]] = {
    "gpu_name": str,
    "hca_types": list,
    "link_layer": str,
    "min_gpus": int,
    "has_rdma": bool,
    "min_fabric_ports": int,
    "max_fabric_ports": int,
    "min_port_rate_gbps": (int, float),
    "min_gpu_netdevs": int,
    "max_gpu_netdevs": int,
    "platforms": list,           # platform ids (netdoctor.inventory.platform): DGXH100, HGX_H100_8GPU, ...
    "min_nvswitches": int,
}


def bundled_packs() -> dict[str, Path]:
    """Bundled pack name (file stem) -> path, from the installed `netdoctor_rules` package."""
    # The package's directory (importlib.resources would add ~9 ms of imports, zipfile's among
    # them; the zipapp unpacks itself, so the packs are files there too).
    location = importlib.import_module(RULES_PACKAGE).__file__
    if location is None:     # a namespace package: no directory that is the bundled packs'
        raise RulesError(f"the bundled rule packs ({RULES_PACKAGE}) are not installed as a package directory")
    root = Path(location).parent
    packs: dict[str, Path] = {}
    for entry in root.iterdir():
        if entry.name.endswith(".toml") and entry.is_file():
            packs[entry.name.removesuffix(".toml")] = entry
    return dict(sorted(packs.items()))


# Parsed pack files by their bytes: auto-selection reads every bundled pack and the default
# pack under each (15 parses of the 51 KB default.toml, ~40 ms of a run); a file is still
# read, and trusted or refused, every time.
_PARSED: dict[bytes, dict[str, Any]] = {}


def _read_toml(path: Path, what: str) -> dict[str, Any]:
    """The file's data, the caller's own copy."""
    return copy.deepcopy(_parsed_toml(path, what))


def pack_table(path: Path) -> dict[str, Any]:
    """The [pack] table of the pack file itself (name, priority, match), without reading
    or merging what it extends: what auto-selection compares against a node."""
    table = _parsed_toml(path, "rule pack").get("pack")
    if not isinstance(table, dict):
        raise RulesError(f"rule pack {path} has no [pack] table")
    return copy.deepcopy(table)


def _parsed_toml(path: Path, what: str) -> dict[str, Any]:
    """The file's data as parsed once per run (shared: never modified by callers)."""
    # A pack decides how a node is graded: as root, one another user can change (a shadow
    # list that hides every check) is refused like an unsafe plugin directory.
    if running_as_root() and path.exists() and (reason := unsafe_path_reason(path)):
        raise RulesError(f"{what} {path} is not trusted when running as root: {reason}")
    try:
        data = read_regular(path, MAX_PACK_BYTES)
        if data is None:
            raise RulesError(f"{what} {path} does not exist")
        if data not in _PARSED:
            _PARSED[data] = _without_retired(tomllib.loads(data.decode("utf-8")), path)
        return _PARSED[data]
    except UnicodeDecodeError as error:
        raise RulesError(f"{what} {path} is not UTF-8 text: {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise RulesError(f"{what} {path} is not valid TOML: {error}") from None
    except ValueError as error:      # larger than a rule pack can be
        raise RulesError(f"{what} {path} is too large: {error}") from None
    except OSError as error:         # including UnsafePath: another user's file in a shared directory
        raise RulesError(f"{what} {path} cannot be read: {error.strerror or error}") from None


def _without_retired(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """The file's data without RETIRED_SETTINGS keys, each logged as deprecated and ignored."""
    for section, retired in RETIRED_SETTINGS.items():
        table = data.get(section)
        if not isinstance(table, dict):
            continue
        for key in sorted(set(table) & set(retired)):
            del table[key]
            log.warning("deprecated rule setting ignored", file=str(path), setting=f"[{section}] {key}",
                        why=retired[key])
    return data


def _resolve_extends(name: str, relative_to: Path) -> Path:
    packs = bundled_packs()
    if name in packs:
        return packs[name]
    candidate = (relative_to.parent / name)
    if candidate.suffix != ".toml":
        candidate = candidate.with_suffix(".toml")
    if candidate.is_file():
        return candidate
    raise RulesError(f"rule pack {relative_to} extends {name!r}, which is neither a bundled pack "
                     f"({', '.join(packs)}) nor a file next to it")


def _load_chain(path: Path) -> tuple[dict[str, Any], list[Path]]:
    """Read a pack and everything it extends; returns the merged data and the files, base first."""
    chain: list[tuple[Path, dict[str, Any]]] = []
    seen: set[Path] = set()
    current: Path | None = path
    while current is not None:
        resolved = current.resolve()
        if resolved in seen:
            names = " -> ".join(str(item[0]) for item in chain)
            raise RulesError(f"rule pack extends itself in a cycle: {names} -> {current}")
        seen.add(resolved)
        data = _read_toml(current, "rule pack")
        if not isinstance(data.get("pack"), dict):
            raise RulesError(f"rule pack {current} has no [pack] table")
        chain.append((current, data))
        parent = data.get("pack", {}).get("extends")
        default = bundled_packs()["default"]
        if parent is None:
            # Every pack stands on the default pack, so every threshold a check reads has a
            # value from a rule pack (never from a fallback in code), even in a site's own pack.
            current = default if resolved != default.resolve() else None
        elif not isinstance(parent, str):
            raise RulesError(f"rule pack {current}: [pack] extends must be a string, not {parent!r}")
        else:
            current = _resolve_extends(parent, current)
    merged: dict[str, Any] = {}
    files: list[Path] = []
    for file_path, data in reversed(chain):
        merged = _merge_pack(merged, data, str(file_path))
        files.append(file_path)
    return merged, files


def _merge_pack(base: dict[str, Any], child: dict[str, Any], origin: str = "") -> dict[str, Any]:
    """Merge a child pack over its parent; child port classes come first.

    A check section the parent has may only set keys the parent knows (a typo such as
    `ib_active_mtu` would otherwise be ignored); new sections (a plugin's), port classes,
    `match` keys and [grade] lists may be added.
    """
    for section, table in child.items():
        if section in STRUCTURE_TABLES or not isinstance(table, dict):
            continue
        known = base.get(section)
        if isinstance(known, dict) and known:
            unknown = sorted(str(key) for key in table if key not in known)
            if unknown:
                raise RulesError(f"rule pack {origin}: unknown setting(s) {', '.join(unknown)} in [{section}] "
                                 f"(known: {', '.join(sorted(map(str, known)))})")
    merged = _deep_merge(base, child, path=(), guard=False)
    merged_classes = merged.get("port-classes")
    if isinstance(merged_classes, dict) and isinstance(child.get("port-classes"), dict):
        # The child's own classes are tried before the parent's, in the child's file order.
        child_names = list(child["port-classes"])
        order = child_names + [name for name in merged_classes if name not in child_names]
        merged["port-classes"] = {name: merged_classes[name] for name in order}
    # Identity, priority and `match` belong to the child alone: a pack does not inherit
    # what selects its parent.
    merged["pack"] = dict(child.get("pack", {}))
    return merged


def _deep_merge(base: Mapping[str, Any], override: Mapping[str, Any], *, path: tuple[str, ...],
                guard: bool, source: str = "") -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        here = (*path, key)
        dotted = ".".join(here)
        if key not in base:
            if guard and not _may_add(here):
                known = ", ".join(sorted(str(name) for name in base)) or "none"
                raise RulesError(f"site rules {source}: unknown setting {dotted!r} (the pack has no such key; "
                                 f"known here: {known})")
            merged[key] = value
            continue
        if isinstance(base[key], dict):
            if not isinstance(value, dict):
                raise RulesError(f"{source or 'rule pack'}: {dotted} must be a table, not {value!r}")
            merged[key] = _deep_merge(base[key], value, path=here, guard=guard, source=source)
        else:
            if isinstance(value, dict):
                raise RulesError(f"{source or 'rule pack'}: {dotted} must be a value, not a table")
            if guard and not _same_kind(base[key], value):
                raise RulesError(f"site rules {source}: {dotted} = {value!r} has the wrong type "
                                 f"(the pack has {base[key]!r})")
            merged[key] = value
    return merged


def _may_add(path: tuple[str, ...]) -> bool:
    # A site may define new port classes (and any field of one), new [grade] lists and its own
    # grade of any Xid (`[kernel-events.xid_severity] "13" = "warn"`, netdoctor 0.2's form).
    if path[0] == "port-classes":
        return True
    if path[:2] == ("kernel-events", "xid_severity") and len(path) == 3:
        return True
    return path[0] == "grade" and len(path) == 2


def _same_kind(old: Any, new: Any) -> bool:
    if isinstance(old, bool) or isinstance(new, bool):
        return isinstance(old, bool) and isinstance(new, bool)
    if isinstance(old, (int, float)) and isinstance(new, (int, float)):
        return True
    return type(old) is type(new)


def _validate(data: dict[str, Any], origin: str) -> list[PortClass]:
    pack = data.get("pack")
    if not isinstance(pack, dict):
        raise RulesError(f"rule pack {origin} has no [pack] table")
    if not isinstance(pack.get("name"), str) or not pack["name"]:
        raise RulesError(f"rule pack {origin}: [pack] name must be a non-empty string")
    if "priority" in pack and (isinstance(pack["priority"], bool) or not isinstance(pack["priority"], int)):
        raise RulesError(f"rule pack {origin}: [pack] priority must be an integer, not {pack['priority']!r}")
    match = pack.get("match", {})
    if not isinstance(match, dict):
        raise RulesError(f"rule pack {origin}: [pack.match] must be a table")
    for key, value in match.items():
        expected = MATCH_FIELDS.get(key)
        if expected is None:
            raise RulesError(f"rule pack {origin}: unknown [pack.match] key {key!r}; known: {', '.join(MATCH_FIELDS)}")
        if not isinstance(value, expected) or (expected is not bool and isinstance(value, bool)):
            raise RulesError(f"rule pack {origin}: [pack.match] {key} = {value!r} has the wrong type")
    if "gpu_name" in match:
        try:
            re.compile(match["gpu_name"])
        except re.error as error:
            raise RulesError(f"rule pack {origin}: [pack.match] gpu_name is not a valid regex: {error}") from None
    grade = data.get("grade", {})
    if not isinstance(grade, dict):
        raise RulesError(f"rule pack {origin}: [grade] must be a table")
    for key, value in grade.items():
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise RulesError(f"rule pack {origin}: [grade] {key} must be a list of check ids")
    unknown_grade = set(grade) - {"required", "shadow"}
    if unknown_grade:
        raise RulesError(f"rule pack {origin}: unknown [grade] keys {sorted(unknown_grade)}; known: required, shadow")
    return _port_classes(data.get("port-classes", {}), origin)


def _port_classes(table: Any, origin: str) -> list[PortClass]:
    if not isinstance(table, dict):
        raise RulesError(f"rule pack {origin}: [port-classes] must hold tables")
    classes: list[PortClass] = []
    for name, spec in table.items():
        if not isinstance(spec, dict):
            raise RulesError(f"rule pack {origin}: port-classes.{name} must be a table")
        for key, value in spec.items():
            expected = PORT_CLASS_FIELDS.get(key)
            if expected is None:
                raise RulesError(f"rule pack {origin}: port-classes.{name} has unknown key {key!r}; "
                                 f"known: {', '.join(PORT_CLASS_FIELDS)}")
            if not isinstance(value, expected) or (expected is not bool and isinstance(value, bool)):
                raise RulesError(f"rule pack {origin}: port-classes.{name}.{key} = {value!r} has the wrong type")
        role = spec.get("role", "compute")
        if role not in ROLES:
            raise RulesError(f"rule pack {origin}: port-classes.{name}.role = {role!r}; must be one of {', '.join(ROLES)}")
        link_layer = spec.get("link_layer")
        if link_layer is not None and link_layer.lower() not in {layer.value.lower() for layer in LinkLayer}:
            raise RulesError(f"rule pack {origin}: port-classes.{name}.link_layer = {link_layer!r}; "
                             f"must be InfiniBand, Ethernet or Unspecified")
        rate = spec.get("expected_rate_gbps")
        classes.append(PortClass(
            name=name,
            role=role,
            expected_rate_gbps=float(rate) if rate is not None else None,
            expected_width=spec.get("expected_width"),
            link_layer=link_layer,
            hca_types=tuple(str(item) for item in spec.get("hca_types", [])),
            hca_names=tuple(str(item) for item in spec.get("hca_names", [])),
            near_gpu=spec.get("near_gpu"),
            switch_management=spec.get("switch_management"),
            description=spec.get("description", ""),
        ))
    return classes


def read_pack(path: Path) -> tuple[dict[str, Any], list[Path], list[PortClass]]:
    """A pack file with everything it extends, merged and validated: data, files (base first), port classes."""
    data, files = _load_chain(path)
    classes = _validate(data, str(path))
    return data, files, classes


def _site_file(site_path: Path | None, env: Mapping[str, str]) -> Path | None:
    if site_path is not None:
        if not site_path.is_file():
            raise RulesError(f"site rules file {site_path} does not exist")
        return site_path
    from_env = env.get(SITE_ENV_VAR)
    if from_env:
        path = Path(from_env)
        if not path.is_file():
            raise RulesError(f"${SITE_ENV_VAR} names {path}, which does not exist")
        return path
    if SYSTEM_SITE_PATH.is_file():
        return SYSTEM_SITE_PATH
    return None




def load_pack(path: Path, reason: str, *, site_path: Path | None = None,
              env: Mapping[str, str] | None = None) -> RulePack:
    """The pack of `path` (chosen for `reason`) with site overrides merged over it.

    Site overrides: `site_path`, else $NETDOCTOR_RULES, else /etc/netdoctor/rules.toml when
    present. Raises RulesError with the file and key on any problem.
    """
    environment = os.environ if env is None else env
    data, files, classes = read_pack(path)

    site = _site_file(site_path, environment)
    if site is not None:
        override = _read_toml(site, "site rules file")
        if "pack" in override:
            raise RulesError(f"site rules {site}: [pack] cannot be overridden; choose a pack with --rules")
        merged = _deep_merge(data, override, path=(), guard=True, source=str(site))
        if isinstance(override.get("port-classes"), dict):
            # Classes a site adds are tried before the pack's own: the site knows its cabling best.
            existing = list(data.get("port-classes", {}))
            added = [name for name in override["port-classes"] if name not in existing]
            merged["port-classes"] = {name: merged["port-classes"][name] for name in added + existing}
        classes = _validate(merged, f"{path} with site overrides {site}")
        data = merged
        files = [*files, site]
        reason += f", site overrides from {site}"

    pack_table = data["pack"]
    log.debug("rule pack loaded", pack=pack_table["name"], reason=reason)
    return RulePack(
        name=pack_table["name"],
        description=pack_table.get("description", ""),
        selection_reason=reason,
        files=files,
        data=data,
        port_classes=classes,
    )


