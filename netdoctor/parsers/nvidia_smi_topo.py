"""`nvidia-smi topo -m` parser."""

from __future__ import annotations

import re
from dataclasses import field

from netdoctor.errors import NothingToParse, ParseError
from netdoctor.records import record
from netdoctor.vocabulary import Topology
from netdoctor.parsers.common import (
    decimal_or_none,
    is_elision_line,
    is_prompt_line,
    numbered_lines,
    require_text,
    screen_tool_errors,
)

SOURCE = "nvidia-smi topo"

# Cell vocabulary of `topo -m`. SOC is the pre-2016 name of SYS. Order matters for the
# glued-cell splitter: longer names first.
_MATRIX_CELL = re.compile(r"NV\d{1,3}|NODE|PIX|PXB|PHB|SYS|SOC|X")
_P2P_CELL = re.compile(r"OK|CNS|GNS|TNS|NS|U|X")
_AFFINITY_HEADERS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_LABEL = re.compile(r"[A-Za-z][\w.-]*")
_GPU_LABEL = re.compile(r"GPU\d+")
_NIC_LEGEND = re.compile(r"^\s*(?P<label>NIC\d+)\s*:\s*(?P<name>\S+)\s*$")
_CPU_LIST = re.compile(r"\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*")
# The command itself, echoed above the matrix by a paste that dropped the shell prompt.
_COMMAND_ECHO = re.compile(r"^\s*nvidia-smi\s+topo\b[^\t]*$")


@record(frozen=True)
class TopoMatrix:
    """The whole `topo -m` table: the Topology plus what Topology has no field for: the
    `GPU NUMA ID` column (newer drivers; None where printed `N/A` or not printed) and every
    node the `NUMA Affinity` column names (one on x86; on Grace the CPU's node and GPU memory
    nodes, `0,3-9,11-17`)."""

    topology: Topology
    gpu_numa_id: dict[str, int | None]
    numa_affinity_nodes: dict[str, tuple[int, ...]] = field(default_factory=dict)


def _split_glued(token: str, vocabulary: re.Pattern[str]) -> list[str] | None:
    """`NODENODE` -> [NODE, NODE]; None when the token is not made of vocabulary cells only.

    Issue/markdown captures convert TABs to spaces and, with many NICs, glue neighbouring
    cells together; the vocabulary is prefix-free enough (X, NV<n>, PIX, PXB, PHB, NODE,
    SYS, SOC) for a greedy left-to-right split to be unambiguous.
    """
    cells: list[str] = []
    position = 0
    while position < len(token):
        match = vocabulary.match(token, position)
        if not match:
            return None
        cells.append(match.group(0))
        position = match.end()
    return cells


def _header_labels(line: str) -> tuple[list[str], list[str]] | None:
    """Device labels and the affinity column names of a header line; None if not a header."""
    rest = line.strip()
    affinity: list[str] = []
    cut = len(rest)
    for name in _AFFINITY_HEADERS:
        index = rest.find(name)
        if index >= 0:
            affinity.append(name)
            cut = min(cut, index)
    labels = rest[:cut].split()
    if not labels or not all(_LABEL.fullmatch(label) for label in labels):
        return None
    if not _GPU_LABEL.fullmatch(labels[0]):
        return None
    return labels, affinity


def _find_header(source: str, text: str) -> tuple[tuple[int, str], list[str], list[str], list[tuple[int, str]]]:
    """((line number, line) of the header, device labels, affinity columns, the lines after it)."""
    lines = list(numbered_lines(text))
    for position, (number, raw) in enumerate(lines):
        if not raw.strip() or is_prompt_line(raw) or is_elision_line(raw) or _COMMAND_ECHO.match(raw):
            continue
        parsed = _header_labels(raw)
        if parsed:
            return (number, raw), parsed[0], parsed[1], lines[position + 1:]
        raise ParseError(source, "expected the matrix header (GPU0 GPU1 ...)", number, raw)
    raise NothingToParse(source, "no matrix in output")


def _row_cells(
    source: str, label: str, rest: str, width: int, vocabulary: re.Pattern[str], number: int, raw: str
) -> tuple[list[str], list[str]]:
    """Split a row into `width` matrix cells and the trailing (affinity) fields."""
    cells: list[str] = []
    trailing: list[str] = []
    for token in rest.split():
        if len(cells) >= width:
            trailing.append(token)
            continue
        glued = _split_glued(token, vocabulary)
        if glued is None:
            raise ParseError(source, f"{label}: {token[:20]!r} is not a matrix cell", number, raw)
        cells.extend(glued)
    if len(cells) != width:
        raise ParseError(source, f"{label}: {len(cells)} matrix cells, header has {width} columns", number, raw)
    return cells, trailing


def parse_nvidia_smi_topo_matrix(text: str) -> TopoMatrix:
    """Parse `nvidia-smi topo -m` into a TopoMatrix (Topology + GPU NUMA IDs).

    Sample (raw: TAB-separated, header underlined with ESC[4m ... ESC[0m on a tty)::

        	GPU0	GPU1	NIC0	NIC1	CPU Affinity	NUMA Affinity	GPU NUMA ID
        GPU0	 X 	NV18	PIX	NODE	0-63,128-191	0		N/A
        GPU1	NV18	 X 	NODE	PIX	0-63,128-191	0		N/A
        NIC0	PIX	NODE	 X 	PIX
        NIC1	NODE	PIX	PIX	 X

        Legend:
          X    = Self
          ...
        NIC Legend:

          NIC0: mlx5_0
          NIC1: mlx5_1

    Rows are split on whitespace and glued cells (`NODENODE`, ` X PIX`) are split on the
    cell vocabulary, so TAB, re-aligned-space and column-merged pastes all parse. Every
    header device must have a row (a partial matrix is refused rather than half-read).
    """
    require_text(SOURCE, text)
    screen_tool_errors(SOURCE, text)
    header, labels, affinity_columns, rest = _find_header(SOURCE, text)
    if len(set(labels)) != len(labels):
        raise ParseError(SOURCE, "duplicate device labels in the header", *header)
    width = len(labels)
    links: dict[tuple[str, str], str] = {}
    cpu_affinity: dict[str, str] = {}
    numa_nodes: dict[str, tuple[int, ...] | None] = {}
    gpu_numa_id: dict[str, int | None] = {}
    nic_names: dict[str, str] = {}
    rows_seen: list[str] = []
    in_legend = False
    for number, raw in rest:
        line = raw.strip()
        if not line or is_prompt_line(raw) or is_elision_line(raw):
            continue
        if line in ("Legend:", "NIC Legend:"):
            in_legend = True
            continue
        legend = _NIC_LEGEND.match(line)
        if legend and (in_legend or rows_seen == labels):
            in_legend = True
            nic_names[legend.group("label")] = legend.group("name")
            continue
        if in_legend:
            if re.match(r"^\S+\s*=", line) or re.match(r"^NV#", line):
                continue
            raise ParseError(SOURCE, "line not recognised in the legend", number, raw)
        first, _, remainder = line.replace("\t", " ").partition(" ")
        tokens = remainder.split()
        if not affinity_columns and tokens and all(_P2P_CELL.fullmatch(token) for token in tokens) \
                and any(token != "X" for token in tokens):
            raise ParseError(SOURCE, "this is a `nvidia-smi topo -p2p` matrix, not `topo -m`", number, raw)
        if first not in labels:
            raise ParseError(SOURCE, f"row label {first[:20]!r} is not a device of the header", number, raw)
        if first in rows_seen:
            raise ParseError(SOURCE, f"second row for {first}", number, raw)
        cells, trailing = _row_cells(SOURCE, first, remainder, width, _MATRIX_CELL, number, raw)
        for column, cell in zip(labels, cells):
            if (column == first) != (cell == "X"):
                raise ParseError(SOURCE, f"{first}/{column}: 'X' must be exactly on the diagonal", number, raw)
            links[(first, column)] = cell
        rows_seen.append(first)
        if trailing:
            _affinity(first, trailing, affinity_columns, cpu_affinity, numa_nodes, gpu_numa_id, number, raw)
    missing = [label for label in labels if label not in rows_seen]
    if missing:
        raise ParseError(SOURCE, f"matrix has no row for {', '.join(missing[:4])} (truncated output?)", *header)
    gpus = tuple(label for label in labels if _GPU_LABEL.fullmatch(label))
    nics = tuple(label for label in labels if not _GPU_LABEL.fullmatch(label))
    # Old drivers label NIC columns with the HCA name itself (`mlx5_0`), no legend.
    for label in nics:
        if not label.startswith("NIC"):
            nic_names.setdefault(label, label)
    topology = Topology(
        gpus=gpus, nics=nics, links=links, nic_names=nic_names,
        cpu_affinity=cpu_affinity, numa_affinity=_cpu_nodes(numa_nodes, gpu_numa_id),
    )
    listed = {label: nodes for label, nodes in numa_nodes.items() if nodes is not None}
    return TopoMatrix(topology=topology, gpu_numa_id=gpu_numa_id, numa_affinity_nodes=listed)


# Linux's MAX_NUMNODES is 1 << CONFIG_NODES_SHIFT (at most 10): a node number beyond it is no node.
_MAX_NODES = 1024


def _node_list(text: str) -> tuple[int, ...] | None:
    """`0,3-9,11-17` -> (0, 3, 4, ..., 17); None for a descending range or a node beyond Linux's limit."""
    nodes: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        low, high = int(first), int(last or first)
        if low > high or high >= _MAX_NODES:
            return None
        nodes.update(range(low, high + 1))
    return tuple(sorted(nodes))


def _cpu_nodes(numa_nodes: dict[str, tuple[int, ...] | None], gpu_numa_id: dict[str, int | None]) -> dict[str, int | None]:
    """The NUMA node of the CPU each GPU hangs off, from the `NUMA Affinity` column.

    One node (x86): that node. A list (Grace: `0,3-9,11-17`, the CPU's node and GPU memory
    nodes): the one node below every `GPU NUMA ID` of the matrix (Linux on Grace numbers the
    CPU sockets' nodes first, GPU memory nodes after them: 0-1, then 2-33 on a GB200 tray).
    None where the column says N/A, or a list names no single such node (no GPU NUMA IDs).
    """
    gpu_nodes = [node for node in gpu_numa_id.values() if node is not None]
    first_gpu_node = min(gpu_nodes) if gpu_nodes else None
    result: dict[str, int | None] = {}
    for label, nodes in numa_nodes.items():
        if nodes is not None and len(nodes) > 1 and first_gpu_node is not None:
            nodes = tuple(node for node in nodes if node < first_gpu_node)
        result[label] = nodes[0] if nodes is not None and len(nodes) == 1 else None
    return result


def _affinity(
    label: str, fields: list[str], columns: list[str], cpu_affinity: dict[str, str],
    numa_nodes: dict[str, tuple[int, ...] | None], gpu_numa_id: dict[str, int | None], number: int, raw: str,
) -> None:
    """Trailing fields of a GPU row: CPU list, NUMA node(s), GPU NUMA ID (each may be N/A)."""
    if len(fields) > max(len(columns), 1):
        raise ParseError(SOURCE, f"{label}: {len(fields)} trailing fields, header names {len(columns)}", number, raw)
    for column, value in zip(columns or ["CPU Affinity"], fields):
        if column == "CPU Affinity":
            if value != "N/A" and not _CPU_LIST.fullmatch(value):
                raise ParseError(SOURCE, f"{label}: CPU affinity {value[:30]!r} is not a CPU list", number, raw)
            cpu_affinity[label] = value
            continue
        if column == "NUMA Affinity":
            # One node on x86; Grace lists the CPU's node and GPU memory nodes (`0,3-9,11-17`).
            nodes = _node_list(value) if value != "N/A" and _CPU_LIST.fullmatch(value) else None
            if value != "N/A" and nodes is None:
                raise ParseError(SOURCE, f"{label}: NUMA affinity {value[:30]!r} is not a node list or N/A", number, raw)
            numa_nodes[label] = nodes
            continue
        if value != "N/A" and not value.isdigit():
            raise ParseError(SOURCE, f"{label}: {column} {value[:20]!r} is not a number or N/A", number, raw)
        gpu_numa_id[label] = decimal_or_none(value)


def parse_nvidia_smi_topo(text: str) -> Topology:
    """Parse `nvidia-smi topo -m` into the inventory's Topology (see parse_nvidia_smi_topo_matrix)."""
    return parse_nvidia_smi_topo_matrix(text).topology
