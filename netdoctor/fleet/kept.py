"""What the fleet keeps of a node's report beside its verdict: versions, rails, probe facts and
strings, each typed and bounded as it is read (a node's own words, never trusted)."""

from __future__ import annotations

import math
import reprlib
import sys
from collections.abc import Mapping
from typing import Any

# What the fleet keeps of a node's text (summaries, names): one node's report can cost the
# report a bounded amount, however long its strings.
MAX_KEPT_CHARS = 500
_MAX_GROWTH = 10**300
# A value that should have been a string, shown: bounded in depth and length whatever it holds
# (`str` of a list nested 900 deep would recurse past the interpreter's limit).
_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother = 3, MAX_KEPT_CHARS, 60
_SHOWN.maxlist = _SHOWN.maxdict = _SHOWN.maxtuple = 8
_SCALARS = (str, int, float, bool, type(None))


def finite(value: Any) -> bool:
    """A finite int or float (an int too large for a float is not: math.isfinite would raise)."""
    if value.__class__ is float:
        return math.isfinite(value)
    return value.__class__ is int and -_MAX_GROWTH < value < _MAX_GROWTH



def kept_text(value: object) -> str:
    """A string of the report as the fleet keeps it: at most `MAX_KEPT_CHARS` long. A value that is
    not a string (where the report should have had one) is shown as `str` would, bounded."""
    text = value if value.__class__ is str else str(value) if value.__class__ in _SCALARS else _SHOWN.repr(value)
    return text if len(text) <= MAX_KEPT_CHARS else text[:MAX_KEPT_CHARS] + "…"


def shown(value: object) -> str:
    """`repr(value)` of a report's value (a wrong schema, grade), bounded in depth and length."""
    return kept_text(repr(value) if value.__class__ in _SCALARS else _SHOWN.repr(value))



# CONTRACT 6.3's version kinds; a node's other keys are not compared.
VERSION_KINDS = ("driver", "cuda_driver", "vbios", "hca_firmware", "ofed", "mlx5_core", "nccl", "kernel",
                 "fabric_manager", "efa", "libfabric", "nccl_net_plugin")
_VERSION_KIND_SET = frozenset(VERSION_KINDS)
# Kinds given per model (a map model -> version); the others are one string per node.
_PER_MODEL_KINDS = frozenset(("vbios", "hca_firmware"))
_MAX_ID_CHARS = 128
_MAX_PORTS = 64


def bounded_versions(data: Any) -> dict[str, Any]:
    """The report's `versions`: known kinds only, a string or a map of up to 16 model -> version
    strings, each cut to 128 characters and interned (ten thousand nodes share a few values)."""
    if data.__class__ is not dict:
        return {}
    intern = sys.intern
    kept: dict[str, Any] = {}
    for kind, value in data.items():
        if kind not in _VERSION_KIND_SET:
            continue
        if kind not in _PER_MODEL_KINDS:
            if value.__class__ is str:
                kept[kind] = intern(value[:_MAX_ID_CHARS])
        elif value.__class__ is dict:
            kept[kind] = {intern(str(model)[:_MAX_ID_CHARS]): intern(version[:_MAX_ID_CHARS])
                          for model, version in list(value.items())[:16] if version.__class__ is str}
    return kept


def bounded_fabric(fabric: Any, neighbors: Any) -> dict[str, Any]:
    """`gpus` and `rails` of the report's `fabric`, each rail with its first-hop switch from
    `neighbors`: typed, up to 64 rails, names cut and interned (a leaf's name is shared by
    its nodes' ports)."""
    if fabric.__class__ is not dict:
        return {}
    gpus, rails = fabric.get("gpus"), fabric.get("rails")
    kept: dict[str, Any] = {"gpus": gpus} if gpus.__class__ is int and 0 <= gpus < 1 << 16 else {}
    if rails.__class__ is not list:
        return kept
    if fabric.get("rails_guessed") is True:
        kept["rails_guessed"] = True
    if neighbors.__class__ is not dict:
        neighbors = {}
    intern = sys.intern
    kept_rails = []
    seen_ports: set[str] = set()   # a port listed twice counts once
    for rail in rails[:_MAX_PORTS]:
        port = rail.get("port") if rail.__class__ is dict else None
        if port.__class__ is not str or port in seen_ports:
            continue
        seen_ports.add(port)
        rate, gpu, switch = rail.get("rate_gbps"), rail.get("gpu"), neighbors.get(port)
        guid = name = None
        if switch.__class__ is dict:
            guid, name = switch.get("switch_guid"), switch.get("switch_name")
            guid = intern(guid[:_MAX_ID_CHARS]) if guid.__class__ is str else None
            name = intern(name[:_MAX_ID_CHARS]) if name.__class__ is str else None
        kept_rails.append((intern(port[:_MAX_ID_CHARS]),
                           float(rate) + 0.0 if finite(rate) else None,     # (-0.0 is 0.0: `fleet.wire` shares equal rails)
                           gpu if gpu.__class__ is int and 0 <= gpu < 1 << 16 else None, guid, name))
    kept["rails"] = tuple(kept_rails)
    return kept


# What the fleet keeps of a probe-node report's `probe` (a node's own words: bounded, typed).
PROBE_KEYS = {"status": str, "reason": str, "round": int, "group": list, "busbw_gbps": float, "transport": str,
               "rails": dict, "sharp": bool, "sharp_initialized": bool, "algorithm": str, "net_plugin": str,
               "net_plugin_missing": bool, "collnet_enable": str}
_MAX_FACT_ITEMS = 64


def bounded_facts(data: Any, keys: Mapping[str, type]) -> dict[str, Any]:
    """The known keys of `data` with the expected type, strings cut, lists and maps of at
    most 64 short strings or finite numbers; anything else is dropped, never trusted."""
    if data.__class__ is not dict:
        return {}
    kept: dict[str, Any] = {}
    for key in data.keys() & keys.keys():
        kind, value = keys[key], data[key]
        if kind is float and finite(value):
            kept[key] = float(value)
        elif kind is int and value.__class__ is int and 0 <= value < 1 << 20:
            kept[key] = value
        elif kind in (str, bool) and value.__class__ is kind:
            kept[key] = kept_text(value) if kind is str else value
        elif kind is list and value.__class__ is list:
            kept[key] = [_small(item) for item in value[:_MAX_FACT_ITEMS]]
        elif kind is dict and value.__class__ is dict:
            kept[key] = {kept_text(name)[:64]: number for name, number in list(value.items())[:_MAX_FACT_ITEMS]
                         if finite(number)}
    return kept


def _small(item: Any) -> Any:
    if item.__class__ is str:
        return item[:MAX_KEPT_CHARS]
    if item.__class__ is dict:
        return {str(name)[:64]: value[:MAX_KEPT_CHARS] if value.__class__ is str else value
                for name, value in list(item.items())[:8]
                if value is None or value.__class__ in (str, bool) or finite(value)}
    return None
