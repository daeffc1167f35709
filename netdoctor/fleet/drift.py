"""Version drift: the fleet judged against itself (CONTRACT 6.3 `drift`).

For each version kind and each group of like hardware, the version most nodes run (the
majority) and every other version with its nodes (the minority). Like hardware: a
per-model kind (`vbios` per GPU model, `hca_firmware` per HCA model and PSID) is compared
among nodes with that model, so an A100's VBIOS is never drift against an H100's; a node
kind (driver, CUDA, kernel, OFED, NCCL, fabric manager) among nodes of the same GPU model
and count. A minority of one node in a thousand is listed like half-and-half.

`gpus` (CONTRACT 7.3) is the GPU count among nodes of one DMI product (`fabric.product`): the
GPUs on the PCI bus where the report has them (a GPU a job's cgroup hides from the sweep still
counts), else NVML's count. "node044 has 7 GPUs where 127 DGXH100 have 8". Nodes that name
no product are not compared: their count says nothing without the platform.

A pack may pin minimum versions (`[fleet-drift] minimum`): `driver = "550.54.15"` for every
group, `"hca_firmware:MT4129 MT_0000000838" = "28.39.1002"` for one; nodes below are
`below_minimum`. Versions compare part by part, numbers as numbers (28.39.1002 > 28.4.0).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from netdoctor.fleet.kept import VERSION_KINDS
from netdoctor.fleet.model import NodeSummary
from netdoctor.util import natural_key

GPU_COUNT = "gpus"      # drift.what of the GPU count among nodes of one DMI product
_KIND_ORDER = {kind: position for position, kind in enumerate((GPU_COUNT, *VERSION_KINDS))}


def hardware_group(node: NodeSummary) -> str:
    """`8x NVIDIA H100 80GB HBM3` (GPU count and models from the report), or `no GPU`."""
    vbios = node.versions.get("vbios")
    models = " + ".join(sorted(vbios, key=natural_key)) if isinstance(vbios, dict) and vbios else ""
    gpus = node.gpus
    if not models:
        return f"{gpus} GPUs" if gpus else "no GPU"
    return f"{gpus}x {models}" if gpus else models


def find_drift(nodes: Iterable[NodeSummary], minimums: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """One entry per (kind, group): majority, minority, node count, and the pinned minimum if any;
    entries with a minority or nodes below the minimum first."""
    seen: dict[tuple[str, str], dict[str, list[str]]] = {}
    groups: dict[tuple[int | None, tuple[str, ...]], str] = {}   # one name per kind of node
    for node in nodes:
        group: str | None = None
        for kind, value in node.versions.items():
            if value.__class__ is dict:
                for among, version in value.items():
                    seen.setdefault((kind, among), {}).setdefault(version, []).append(node.host)
                continue
            if group is None:
                vbios = node.versions.get("vbios")
                shape = (node.gpus, tuple(vbios) if vbios.__class__ is dict else ())
                group = groups.get(shape) or groups.setdefault(shape, hardware_group(node))
            seen.setdefault((kind, group), {}).setdefault(value, []).append(node.host)
        product, on_bus = node.platform or (None, None)
        count = on_bus if on_bus is not None else node.gpus
        if product and count is not None:
            seen.setdefault((GPU_COUNT, product), {}).setdefault(str(count), []).append(node.host)
    pinned = minimums or {}
    entries = [_entry(kind, among, by_version, pinned.get(f"{kind}:{among}") or pinned.get(kind))
               for (kind, among), by_version in seen.items()]
    entries.sort(key=lambda entry: (not (entry["minority"] or entry.get("below_minimum")),
                                    _KIND_ORDER.get(entry["what"], len(_KIND_ORDER)), natural_key(entry["among"])))
    return entries


def _entry(kind: str, among: str, by_version: dict[str, list[str]], minimum: str | None) -> dict[str, Any]:
    # Ties go to the newer version: half-way through a rollout, the target is the majority.
    majority = max(by_version, key=lambda version: (len(by_version[version]), natural_key(version)))
    minority = {version: sorted(hosts, key=natural_key)
                for version, hosts in sorted(by_version.items(), key=lambda item: (len(item[1]), natural_key(item[0])))
                if version != majority}
    entry: dict[str, Any] = {"what": kind, "among": among, "majority": majority, "minority": minority,
                             "nodes": sum(map(len, by_version.values()))}
    if minimum and kind != GPU_COUNT:
        floor = natural_key(minimum)
        entry["minimum"] = minimum
        entry["below_minimum"] = sorted((host for version, hosts in by_version.items()
                                         if natural_key(version) < floor for host in hosts), key=natural_key)
    return entry


def drifted(entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries an operator must look at: a minority, or nodes below a pinned minimum."""
    return [entry for entry in entries if entry["minority"] or entry.get("below_minimum")]
