"""Rule packs: the thresholds and port classes every check judges against.

A pack is a TOML file (see docs/rules.md). Bundled packs live in the `netdoctor_rules`
package; one may `extends` another (a bundled name or a path relative to it). A site
override file is deep-merged over the chosen pack, but may only change keys the pack
already has (a typo guard), add `[port-classes.*]` tables and change `[grade]` lists.

Selection: an explicit name or path wins; otherwise every bundled pack whose
`[pack.match]` holds for the inventory is a candidate and the highest `priority`
wins (ties: the alphabetically first name, so the choice is deterministic).
"""

from __future__ import annotations

import fnmatch
import importlib.resources
import os
import re
import tomllib
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import structlog

from netdoctor.errors import RulesError
from netdoctor.inventory.model import Hca, Inventory, LinkLayer, Port, PortState
from netdoctor.util import natural_key

log = structlog.get_logger(__name__)

RULES_PACKAGE = "netdoctor_rules"
DEFAULT_PACK = "default"
SYSTEM_SITE_PATH = Path("/etc/netdoctor/rules.toml")
SITE_ENV_VAR = "NETDOCTOR_RULES"

ROLES = ("compute", "storage", "management", "unused")
PORT_CLASS_FIELDS = {
    "description": str,
    "link_layer": str,
    "hca_types": list,
    "hca_names": list,
    "role": str,
    "expected_rate_gbps": (int, float),
    "expected_width": int,
    "near_gpu": bool,
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
}
# PCIe distances from `nvidia-smi topo -m` that put a NIC next to a GPU: at most one bridge
# (PIX) or several bridges of one PCIe switch tree (PXB), never through the CPU's root complex.
NEAR_GPU_LEVELS = ("PIX", "PXB")
# Tables of a pack that are not check sections.
STRUCTURE_TABLES = ("pack", "grade", "port-classes")


@dataclass(frozen=True)
class PortClass:
    """How a pack classes ports: the first class (in file order) whose match fields all hold wins.

    A match field left empty does not constrain. `role` decides how down ports are judged:
    ports of an `unused` class are skipped when down, never failed.
    """

    name: str
    role: str = "compute"
    expected_rate_gbps: float | None = None
    expected_width: int | None = None
    link_layer: str | None = None
    hca_types: tuple[str, ...] = ()
    hca_names: tuple[str, ...] = ()        # globs, e.g. "mlx5_bond_*"
    near_gpu: bool | None = None           # the HCA sits on a GPU's PCIe switch (PIX/PXB)
    description: str = ""

    def matches(self, port: Port, hca: Hca, inventory: Inventory | None = None) -> bool:
        """All given match fields hold. `near_gpu` needs the inventory; where it cannot be told
        (no inventory, no matrix and no NUMA facts) it does not constrain, so the first class in
        file order (the compute rails, by convention) takes the port and judges it strictly."""
        if self.link_layer is not None:
            if port.link_layer is None or str(port.link_layer).lower() != self.link_layer.lower():
                return False
        if self.hca_types and hca.ca_type not in self.hca_types:
            return False
        if self.hca_names and not any(fnmatch.fnmatchcase(hca.name, pattern) for pattern in self.hca_names):
            return False
        if self.near_gpu is not None and inventory is not None:
            near = gpu_proximity(inventory, hca).near
            if near is not None and near != self.near_gpu:
                return False
        return True


@dataclass(frozen=True)
class GpuProximity:
    """Whether an HCA sits next to a GPU, and on what evidence (`basis`, for findings)."""

    near: bool | None          # None: cannot be told
    basis: str


def gpu_proximity(inventory: Inventory, hca: Hca) -> GpuProximity:
    """Is `hca` PIX or PXB to at least one GPU in `nvidia-smi topo -m`?

    Without a usable matrix (nvidia-smi missing or hung, no NIC legend, the HCA not in it)
    the fallback is weaker: the HCA shares a NUMA node with a GPU. On a two-socket node with
    GPUs on both sockets every NIC passes it, so the basis says which one was used.
    """
    topology = inventory.topology
    if topology is None:
        why = f"no nvidia-smi topo -m matrix ({inventory.source('nvidia-smi-topo-m').reason()})"
    elif not topology.nic_names:
        why = "nvidia-smi topo -m printed no NIC legend"
    else:
        label = topology.nic_label(hca.name)
        levels = {gpu: topology.link(gpu, label) for gpu in topology.gpus} if label else {}
        known = {gpu: level for gpu, level in levels.items() if level is not None}
        if known:
            near = [gpu for gpu, level in known.items() if level in NEAR_GPU_LEVELS]
            if near:
                return GpuProximity(True, f"{known[near[0]]} to {near[0]} in nvidia-smi topo -m")
            summary = ", ".join(sorted(set(known.values())))
            return GpuProximity(False, f"no GPU at PIX/PXB in nvidia-smi topo -m (only {summary})")
        why = f"{hca.name} is not in the nvidia-smi topo -m matrix"
    if not inventory.gpus:
        return GpuProximity(None, f"no GPUs known and {why}")
    gpu_nodes = {gpu.numa_node for gpu in inventory.gpus if gpu.numa_node is not None}
    if hca.numa_node is None or not gpu_nodes:
        return GpuProximity(None, f"{why}, and the NUMA node of {hca.name} or of the GPUs is unknown")
    sharing = [gpu.label for gpu in sorted(inventory.gpus, key=lambda gpu: gpu.index)
               if gpu.numa_node == hca.numa_node]
    if sharing:
        return GpuProximity(True, f"NUMA node {hca.numa_node} shared with {sharing[0]} "
                                  f"(NUMA fallback: {why})")
    return GpuProximity(False, f"no GPU on NUMA node {hca.numa_node} (NUMA fallback: {why})")


class RuleSection(Mapping[str, Any]):
    """A read-only view of one check's section that also knows its pack.

    Checks receive this as `CheckContext.rules`; `pack_of(ctx.rules)` gives them the
    port classes without widening the CheckContext interface.
    """

    def __init__(self, values: Mapping[str, Any], pack: RulePack | None) -> None:
        self._values = dict(values)
        self.pack = pack

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"RuleSection({self._values!r})"


@dataclass
class RulePack:
    """The rule pack in force, after `extends` and site overrides."""

    name: str
    description: str
    selection_reason: str
    files: list[Path]
    data: dict[str, Any]
    port_classes: list[PortClass] = field(default_factory=list)

    def section(self, check_id: str) -> RuleSection:
        values = self.data.get(check_id, {})
        if not isinstance(values, dict):
            raise RulesError(f"rule pack {self.name!r}: [{check_id}] must be a table, not {type(values).__name__}")
        return RuleSection(values, self)


    @property
    def required(self) -> frozenset[str]:
        return frozenset(self.data.get("grade", {}).get("required", []))

    @property
    def shadow(self) -> frozenset[str]:
        return frozenset(self.data.get("grade", {}).get("shadow", []))

    def is_shadow(self, check_id: str, rule: str | None = None) -> bool:
        """True when the whole check or this `check.rule` key is in `[grade] shadow`."""
        if check_id in self.shadow:
            return True
        if rule is None:
            return False
        key = rule if rule.startswith(f"{check_id}.") else f"{check_id}.{rule}"
        return key in self.shadow

    def port_class(self, port: Port, hca: Hca, inventory: Inventory | None = None) -> PortClass | None:
        """The first class (file order) that matches; `inventory` is needed for `near_gpu`."""
        return next((port_class for port_class in self.port_classes
                     if port_class.matches(port, hca, inventory)), None)

    def port_class_ignoring_placement(self, port: Port, hca: Hca) -> PortClass | None:
        """The class the port would get if `near_gpu` were not asked.

        Tells a misplaced rail NIC (a compute-class card moved away from its GPU, which
        gpu-nic-affinity must still see and fail) from a storage NIC of another kind.
        """
        return next((port_class for port_class in self.port_classes
                     if replace(port_class, near_gpu=None).matches(port, hca)), None)

    def to_toml(self) -> str:
        """The merged pack as TOML, with where it came from in a header comment."""
        lines = [
            f"# rule pack: {self.name}",
            f"# selected: {self.selection_reason}",
            *(f"# file: {path}" for path in self.files),
            "",
        ]
        ordered = [key for key in STRUCTURE_TABLES if key in self.data]
        ordered += [key for key in self.data if key not in STRUCTURE_TABLES]
        body = _toml_tables(self.data, ordered, prefix=())
        return "\n".join(lines) + body


# -- TOML output (tomllib reads only) ----------------------------------------------------

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


# -- reading packs -----------------------------------------------------------------------

def bundled_packs() -> dict[str, Path]:
    """Bundled pack name (file stem) -> path, from the installed `netdoctor_rules` package."""
    root = importlib.resources.files(RULES_PACKAGE)
    packs: dict[str, Path] = {}
    for entry in root.iterdir():
        if entry.name.endswith(".toml") and entry.is_file():
            packs[entry.name.removesuffix(".toml")] = Path(str(entry))
    return dict(sorted(packs.items()))


def _read_toml(path: Path, what: str) -> dict[str, Any]:
    try:
        with path.open("rb") as stream:
            return tomllib.load(stream)
    except FileNotFoundError:
        raise RulesError(f"{what} {path} does not exist") from None
    except tomllib.TOMLDecodeError as error:
        raise RulesError(f"{what} {path} is not valid TOML: {error}") from None
    except OSError as error:
        raise RulesError(f"{what} {path} cannot be read: {error.strerror or error}") from None


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
        if section in ("pack", "port-classes", "grade") or not isinstance(table, dict):
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
    # A site may define new port classes (and any field of one) and new [grade] lists.
    if path[0] == "port-classes":
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
                             f"must be InfiniBand or Ethernet")
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
            description=spec.get("description", ""),
        ))
    return classes


# -- selection ---------------------------------------------------------------------------

def _compute_link_layers(inventory: Inventory, classes: list[PortClass]) -> set[str]:
    """The most common link layer of the ports a pack would class as compute (or leave unclassed)."""
    layers: Counter[str] = Counter()
    for hca in inventory.hcas:
        for port in hca.ports.values():
            port_class = next((item for item in classes if item.matches(port, hca, inventory)), None)
            if port_class is not None and port_class.role != "compute":
                continue
            if port.link_layer is not None:
                layers[str(port.link_layer)] += 1
    if not layers:
        return set()
    top = max(layers.values())
    return {layer for layer, count in layers.items() if count == top}


def _fabric_ports(match: Mapping[str, Any], inventory: Inventory) -> list[Port]:
    """The RDMA ports that could carry a GPU fabric, for `min_fabric_ports`/`max_fabric_ports`.

    A port counts when it has the match's `link_layer` and its HCA one of the match's
    `hca_types` (where given), and it runs at `min_port_rate_gbps` or more. A port that is
    not ACTIVE reports a placeholder rate (40 on a down 400G port), so it counts by its HCA
    type alone, and only when the match names `hca_types`. The pack's port classes are not
    consulted: a pack that classes every port as management must still be told apart from a
    node with a real fabric. SR-IOV VFs whose physical function is here are not counted twice.
    """
    layer = match.get("link_layer")
    types = match.get("hca_types")
    minimum = match.get("min_port_rate_gbps")
    counted: list[Port] = []
    for hca in inventory.hcas:
        if physical_function(inventory, hca) is not None:
            continue
        if types is not None and hca.ca_type not in types:
            continue
        for port in hca.ports.values():
            if layer is not None and (port.link_layer is None or str(port.link_layer).lower() != layer.lower()):
                continue
            if minimum is not None:
                if port.state is not PortState.ACTIVE:
                    if types is None:
                        continue
                elif port.rate is None or port.rate.gbps is None or port.rate.gbps < minimum:
                    continue
            counted.append(port)
    return counted


def _describe_fabric_filter(match: Mapping[str, Any]) -> str:
    parts = []
    if "link_layer" in match:
        parts.append(str(match["link_layer"]))
    if "min_port_rate_gbps" in match:
        parts.append(f">= {match['min_port_rate_gbps']:g} Gb/s")
    if "hca_types" in match:
        parts.append(f"on {'/'.join(match['hca_types'])}")
    return " ".join(["RDMA ports", *parts])


def match_reasons(data: Mapping[str, Any], classes: list[PortClass], inventory: Inventory) -> tuple[bool, list[str]]:
    """Whether a pack's `[pack.match]` holds for this inventory, and what held (or first failed)."""
    match = data.get("pack", {}).get("match", {})
    held: list[str] = []
    if "gpu_name" in match:
        pattern = re.compile(match["gpu_name"])
        names = [gpu.name for gpu in inventory.gpus if gpu.name]
        hit = next((name for name in names if pattern.search(name)), None)
        if hit is None:
            return False, [f"no GPU name matches {match['gpu_name']!r}"]
        held.append(f"GPU {hit!r} matches {match['gpu_name']!r}")
    if "hca_types" in match:
        types = sorted({hca.ca_type for hca in inventory.hcas if hca.ca_type})
        hit_types = [ca_type for ca_type in types if ca_type in match["hca_types"]]
        if not hit_types:
            return False, [f"no HCA of type {', '.join(match['hca_types'])} (have {', '.join(types) or 'none'})"]
        held.append(f"HCA type {', '.join(hit_types)}")
    if "link_layer" in match:
        layers = _compute_link_layers(inventory, classes)
        if match["link_layer"] not in layers:
            return False, [f"compute ports are not {match['link_layer']} (have {', '.join(sorted(layers)) or 'none'})"]
        held.append(f"compute ports are {match['link_layer']}")
    if "min_gpus" in match:
        if len(inventory.gpus) < match["min_gpus"]:
            return False, [f"{len(inventory.gpus)} GPUs, fewer than {match['min_gpus']}"]
        held.append(f"{len(inventory.gpus)} GPUs")
    if "has_rdma" in match:
        has_rdma = bool(inventory.ports)
        if has_rdma != match["has_rdma"]:
            return False, ["node has RDMA ports" if has_rdma else "node has no RDMA ports"]
        held.append("has RDMA ports" if has_rdma else "no RDMA ports")
    if "min_fabric_ports" in match or "max_fabric_ports" in match:
        count = len(_fabric_ports(match, inventory))
        what = _describe_fabric_filter(match)
        if "min_fabric_ports" in match and count < match["min_fabric_ports"]:
            return False, [f"{count} {what}, fewer than {match['min_fabric_ports']}"]
        if "max_fabric_ports" in match and count > match["max_fabric_ports"]:
            return False, [f"{count} {what}, more than {match['max_fabric_ports']}"]
        held.append(f"{count} {what}")
    return True, held


def _load_path(path: Path) -> tuple[dict[str, Any], list[Path], list[PortClass]]:
    data, files = _load_chain(path)
    classes = _validate(data, str(path))
    return data, files, classes


def _auto_select(inventory: Inventory | None) -> tuple[Path, str]:
    packs = bundled_packs()
    if DEFAULT_PACK not in packs:
        raise RulesError(f"the bundled default rule pack is missing from {RULES_PACKAGE}")
    if inventory is None:
        return packs[DEFAULT_PACK], "default (no inventory to match packs against)"
    candidates: list[tuple[int, str, list[str]]] = []
    for name, path in packs.items():
        data, _files, classes = _load_path(path)
        holds, reasons = match_reasons(data, classes, inventory)
        if holds:
            candidates.append((int(data["pack"].get("priority", 0)), name, reasons))
        else:
            log.debug("rule pack does not match", pack=name, reason="; ".join(reasons))
    if not candidates:
        return packs[DEFAULT_PACK], "default (no other pack matches)"
    candidates.sort(key=lambda item: (-item[0], item[1]))
    priority, name, reasons = candidates[0]
    why = "; ".join(reasons) if reasons else "matches every node"
    return packs[name], f"auto-selected {name} (priority {priority}): {why}"


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


def load_rules(selector: str | None, inventory: Inventory | None = None, *, site_path: Path | None = None,
               env: Mapping[str, str] | None = None) -> RulePack:
    """The rule pack in force: explicit (`selector` = bundled name or .toml path) or auto-selected.

    Site overrides (`site_path`, else $NETDOCTOR_RULES, else /etc/netdoctor/rules.toml when
    present) are merged over it. Raises RulesError with the file and key on any problem.
    """
    environment = os.environ if env is None else env
    packs = bundled_packs()
    if selector is None:
        path, reason = _auto_select(inventory)
    elif selector in packs:
        path, reason = packs[selector], f"--rules {selector}"
    elif selector.endswith(".toml") or os.sep in selector:
        path, reason = Path(selector), f"--rules {selector}"
        if not path.is_file():
            raise RulesError(f"rule pack file {path} does not exist")
    else:
        raise RulesError(f"unknown rule pack {selector!r}; bundled packs: {', '.join(packs)} (or give a .toml path)")
    data, files, classes = _load_path(path)

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


# -- helpers for checks ------------------------------------------------------------------

def pack_of(rules: Mapping[str, Any]) -> RulePack | None:
    """The pack a check's `ctx.rules` came from (None when a plain dict was passed)."""
    return getattr(rules, "pack", None)


def classified_ports(inventory: Inventory, rules: Mapping[str, Any]) -> list[tuple[Hca, Port, PortClass | None]]:
    """Every RDMA port in natural order (mlx5_2 before mlx5_10) with its pack port class."""
    pack = pack_of(rules)
    result: list[tuple[Hca, Port, PortClass | None]] = []
    for hca in sorted(inventory.hcas, key=lambda item: natural_key(item.name)):
        for number in sorted(hca.ports):
            port = hca.ports[number]
            result.append((hca, port, pack.port_class(port, hca, inventory) if pack else None))
    return result


def role_of(port_class: PortClass | None) -> str:
    """A port no class matches is a compute port (the doc's rule: judged strictly)."""
    return port_class.role if port_class is not None else "compute"


def class_evidence(inventory: Inventory, hca: Hca, port_class: PortClass | None,
                   rules: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Evidence of how a port was classed: class, role, and the GPU proximity the pack's
    classes relied on (`rules`: the check's section, to see whether any class asks `near_gpu`)."""
    evidence: dict[str, Any] = {"port_class": port_class.name if port_class else None, "role": role_of(port_class)}
    pack = pack_of(rules) if rules is not None else None
    classes = pack.port_classes if pack is not None else ([port_class] if port_class is not None else [])
    if any(item.near_gpu is not None for item in classes):
        evidence["gpu_proximity"] = gpu_proximity(inventory, hca).basis
    return evidence


def physical_function(inventory: Inventory, hca: Hca) -> Hca | None:
    """The RDMA device of an SR-IOV VF's physical function, when this node has it.

    A VF shares its PF's physical link (its port state follows the PF and the vport, its
    PCIe link is the PF's): such a VF is judged through its PF. A VF whose PF is not an RDMA
    device here (a cloud VM sees only VFs, and no `physfn` link) is judged itself.
    """
    if hca.physical_function is None:
        return None
    return next((other for other in inventory.hcas
                 if other is not hca and other.pci_address == hca.physical_function), None)


def virtual_function_note(inventory: Inventory, hca: Hca) -> str | None:
    """The skip sentence for a VF judged through its PF, or None when `hca` is judged itself."""
    parent = physical_function(inventory, hca)
    if parent is None:
        return None
    return (f"SR-IOV virtual function of {hca.physical_function} ({parent.name}): judged through its "
            "physical function")


def unavailable_reason(inventory: Inventory, *source_names: str) -> str:
    """Why none of these sources gave a fact: `ibstat is not available; sysfs failed: ...`."""
    reasons = [inventory.source(name).reason() for name in source_names if not inventory.source(name).usable]
    if reasons:
        return "; ".join(reasons)
    return f"not reported by {' or '.join(source_names)}"
