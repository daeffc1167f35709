"""`nvidia-imex-ctl -N` parser: the IMEX domain (GB200/GB300 NVL72) as this node's daemon sees it.

Real output, IMEX 570.172 (tests/data/corpus/nvidia-imex-ctl, AWS ParallelCluster guide, 18
p6e-gb200 nodes; legend shortened here)::

    Connectivity Table Legend:
    I - Invalid - Node wasn't reachable, no connection status available
    ...
    !V! - Version mismatch, communication disabled.
    !M! - Node map mismatch, communication disabled.
    C - Connected - Ready for operation

    5/12/2025 06:08:10.580
    Nodes:
    Node #0   - 172.31.48.81    - READY                - Version: 570.172
    Node #1   - 172.31.48.98    - READY                - Version: 570.172

     Nodes From\\To  0   1
           0        C   C
           1        C   C

    Domain State: UP

The older 570.00 build prints no `!V!`/`!M!` legend lines, no `- Version:` column, 3-wide
matrix cells and no blank line before `Domain State`. Row = the "from" node, column = the "to"
node. `Domain State` is UP, DOWN or DEGRADED (NVIDIA/DCGM dcgmlib/src/DcgmImexManager.cpp
@b38d2d8, which reads the same state from `-N -j`); a node's status is READY in every real
capture (the daemon states of `nvidia-imex-ctl -q`: INITIALIZING, STARTING_AUTH_SERVER,
WAITING_FOR_PEERS, WAITING_FOR_RECOVERY, INIT_GPU, READY, SHUTTING_DOWN, UNAVAILABLE, same file).

A daemon of NVIDIA's DRA driver (ComputeDomain, IMEX `--nogpu`, DNS names) prints host names,
stars the node it runs on and leaves an unreachable node's version empty (a public DRA test
log, search index id 68494140414; its `-N -j` gives the UNAVAILABLE nodes `version ""`)::

    Node #0   - compute-domain-daemon-0000 - READY                - Version: NO_GPU
    Node #1   * compute-domain-daemon-0001 *  - READY             - Version: NO_GPU

The starred node is `local`; an empty `Version:` is None.
"""

from __future__ import annotations

import re
from dataclasses import field

from netdoctor.errors import ParseError
from netdoctor.parsers.common import decimal_or_none, numbered_lines, require_text, screen_tool_errors
from netdoctor.records import record

SOURCE = "nvidia-imex-ctl -N"
_LEGEND = "Connectivity Table Legend:"
_LEGEND_LINE = re.compile(r"^\s*(?:[A-Z]|![A-Z]!)\s+-\s+\S")
_TIMESTAMP = re.compile(r"^\s*\d{1,2}/\d{1,2}/\d{4} \d{1,2}:\d{2}:\d{2}(?:\.\d+)?\s*$")
# `Node #1   - ADDRESS - ...`, or `Node #1   * ADDRESS *  - ...` for the node the daemon runs on.
_NODE = re.compile(r"^\s*Node\s*#\s*(\d+)\s+([-*])\s+(.*)$")
_VERSION = re.compile(r"^Version:\s*(\S*)$")
_MATRIX_HEADER = re.compile(r"^\s*Nodes From\\To\s*(.*)$")
_MATRIX_ROW = re.compile(r"^\s*(\d+)\s+(\S.*)$")
_CELL = re.compile(r"^(?:[A-Z]|![A-Z]!)$")
_DOMAIN_STATE = re.compile(r"^\s*Domain State\s*:\s*(\S*)\s*$")
# What the tool prints when it cannot answer (DcgmImexManager.cpp checks for the first one).
_IMEX_ERRORS = (("Failed to read node configuration file", "IMEX is not configured on this node"),)


@record(frozen=True)
class ImexNode:
    """One `Node #N - ADDRESS - STATUS - Version: V` line."""

    index: int
    address: str                    # an IP address or a host name, as printed
    status: str                     # READY | UNAVAILABLE | ... as printed, upper case
    version: str | None = None      # None: no `Version:` column, or an empty one
    local: bool = False             # printed `* ADDRESS *`: the node the answering daemon runs on

    @property
    def ready(self) -> bool:
        return self.status.split(" ", 1)[0] == "READY"


@record(frozen=True)
class ImexDomain:
    """The domain: its nodes, the connection matrix (from -> to -> letter: C connected, N never
    connected, ...), and `Domain State`."""

    state: str | None = None        # UP | DOWN | DEGRADED; None: the line was missing
    nodes: tuple[ImexNode, ...] = ()
    connections: dict[tuple[int, int], str] = field(default_factory=dict, hash=False)
    timestamp: str | None = None    # the daemon's time of the answer, as printed (`5/12/2025 06:08:10.580`)

    def node(self, index: int) -> ImexNode | None:
        return next((node for node in self.nodes if node.index == index), None)

    def not_connected(self, index: int | None = None) -> dict[tuple[int, int], str]:
        """Matrix cells other than `C` (all of them, or those in row or column `index`)."""
        return {pair: cell for pair, cell in sorted(self.connections.items())
                if cell != "C" and (index is None or index in pair)}


def parse_nvidia_imex_ctl(text: str) -> ImexDomain:
    """The whole `-N` answer. NothingToParse when empty; ParseError on a tool error or a line that
    is none of the legend, the timestamp, a node line, the matrix or the domain state."""
    require_text(SOURCE, text)
    screen_tool_errors(SOURCE, text)
    for needle, meaning in _IMEX_ERRORS:
        if needle in text:
            number, line = next((n, line) for n, line in numbered_lines(text) if needle in line)
            raise ParseError(SOURCE, f"tool error: {meaning}: {line.strip()}", number, line)
    state: str | None = None
    timestamp: str | None = None
    nodes: list[ImexNode] = []
    connections: dict[tuple[int, int], str] = {}
    columns: list[int] | None = None
    in_legend = False
    for number, line in numbered_lines(text):
        stripped = line.strip()
        if not stripped:
            in_legend = False
            continue
        if stripped == _LEGEND:
            in_legend = True
            continue
        if in_legend and _LEGEND_LINE.match(line):
            continue                  # legend wording varies by build (570.172 added !V! and !M!)
        in_legend = False
        if stripped == "Nodes:":
            continue
        if _TIMESTAMP.match(line):
            timestamp = stripped
            continue
        if (match := _DOMAIN_STATE.match(line)) is not None:
            if not match.group(1):
                raise ParseError(SOURCE, "`Domain State:` without a state", number, line)
            state = match.group(1).upper()
            continue
        if (match := _NODE.match(line)) is not None:
            nodes.append(_node(int(match.group(1)), match.group(2) == "*", match.group(3), number, line))
            continue
        if (match := _MATRIX_HEADER.match(line)) is not None:
            columns = _indices(match.group(1), number, line)
            continue
        if columns is not None and (match := _MATRIX_ROW.match(line)) is not None:
            cells = match.group(2).split()
            if len(cells) != len(columns) or not all(_CELL.match(cell) for cell in cells):
                raise ParseError(SOURCE, f"a matrix row needs {len(columns)} connection letters", number, line)
            row = int(match.group(1))
            connections.update({(row, column): cell for column, cell in zip(columns, cells, strict=True)})
            continue
        raise ParseError(SOURCE, "not a legend, `Node #`, matrix or `Domain State` line", number, line)
    if not nodes and state is None:
        raise ParseError(SOURCE, "no `Node #` line and no `Domain State`")
    return ImexDomain(state, tuple(nodes), connections, timestamp)


def _node(index: int, local: bool, rest: str, number: int, line: str) -> ImexNode:
    """`172.31.48.81    - READY                - Version: 570.172` (the version part only from 570.172
    on, and empty on an UNAVAILABLE node); on the local node `ADDRESS *  - READY ...` (its
    opening star already read)."""
    parts = [part.strip() for part in re.split(r"\s+-\s+", rest.strip())]
    if local and parts[0].endswith("*"):
        parts[0] = parts[0][:-1].rstrip()
    if len(parts) < 2 or not parts[0] or not parts[1] or len(parts) > 3 or "*" in parts[0]:
        raise ParseError(SOURCE, "a node line needs `ADDRESS - STATUS`", number, line)
    version = None
    if len(parts) == 3:
        match = _VERSION.match(parts[2])
        if match is None:
            raise ParseError(SOURCE, "expected `Version: V` after the node's status", number, line)
        version = match.group(1) or None
    return ImexNode(index, parts[0], parts[1].upper(), version, local)


def _indices(text: str, number: int, line: str) -> list[int]:
    tokens = text.split()
    indices = [decimal_or_none(token, max_digits=6) for token in tokens]
    if not indices or None in indices:
        raise ParseError(SOURCE, "the matrix header must list node numbers", number, line)
    return [index for index in indices if index is not None]
