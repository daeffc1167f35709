"""Parsers for NCCL's own debug output (`NCCL_DEBUG=INFO`) and for nccl-tests result tables.

Both are pure: text in, frozen dataclasses out. NCCL lines interleave arbitrarily
between threads and ranks, and nccl-tests rows can be cut in pieces by INFO lines
printed in the middle of them, so both parsers first separate log text from table text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from netdoctor.errors import NothingToParse, ParseError

# `host:pid:tid [dev] [file.cc:line] NCCL LEVEL message`; the location part appears on WARN
# lines. nccl-tests rows may have the prefix glued to their end (`... -1mew0:65704:...`),
# so the host must start with a letter to be told apart from the row's last number.
_PREFIX = re.compile(
    r"(?P<host>[A-Za-z][\w.\-]*):(?P<pid>\d+):(?P<tid>\d+) \[(?P<device>\d+)\] "
    r"(?:(?P<location>\S+) )?NCCL (?P<level>INFO|WARN|TRACE|ABORT) ?(?P<message>.*)$"
)
# Authors often quote lines with the prefix trimmed: `NCCL INFO NET/IB : Using ...`.
_BARE = re.compile(r"^\s*(?:(?P<location>\S+\.cc:\d+) )?NCCL (?P<level>INFO|WARN|TRACE|ABORT) (?P<message>.*)$")


@dataclass(frozen=True)
class LogLine:
    line_number: int                 # 1-based, of the physical line where the message starts
    level: str                       # INFO | WARN | TRACE | ABORT
    message: str                     # continuation lines of a wrapped WARN are joined with a space
    host: str | None = None
    pid: int | None = None
    device: int | None = None
    location: str | None = None      # `transport/net_ib.cc:1296` on WARN lines


@dataclass(frozen=True)
class ChannelConnection:
    """`Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer/read` (or old `Ring 00 : 3 -> 10 ...`)."""

    channel: int
    source_rank: int
    target_rank: int
    via: str                         # the transport text as printed
    direction: str | None = None     # send | receive (network connections only)

    @property
    def kind(self) -> str:
        """P2P, SHM, NET/IB, NET/Socket, COLLNET, ...: the transport family."""
        parts = self.via.split("/")
        if parts[0] == "NET" and len(parts) > 1:
            return f"NET/{parts[1]}"
        return parts[0]

    @property
    def gdr(self) -> bool | None:
        """GPUDirect RDMA for a network connection (`/GDRDMA` suffix); None for non-network ones."""
        if not self.kind.startswith("NET/"):
            return None
        return "GDRDMA" in self.via.split("/")


@dataclass(frozen=True)
class NetDevice:
    """One entry of `NET/IB : Using [0]mlx5_0:1/IB ...` or `NET/Socket : Using [0]eth0:10.0.0.23<0>`."""

    plugin: str                      # IB, Socket, FastSocket, ...
    index: int
    name: str                        # mlx5_0, eth0
    port: int | None = None
    link_layer: str | None = None    # IB | RoCE (IB plugin); None for sockets
    address: str | None = None       # socket plugins: the IP address


@dataclass(frozen=True)
class GdrState:
    """`NET/IB : GPU Direct RDMA Enabled|Disabled for HCA 0 'mlx5_0'`."""

    plugin: str
    hca_index: int
    device: str
    enabled: bool


@dataclass(frozen=True)
class SearchedGraph:
    """`Pattern 4, crossNic 0, nChannels 12, bw 30.000000/30.000000, type NVL/PIX, sameChannels 1`."""

    pattern: int
    channels: int
    bandwidth_intra: float
    bandwidth_inter: float
    path_type: str                   # NVL/PIX, PHB/PIX, SYS/PIX, ...


@dataclass(frozen=True)
class NcclLogFacts:
    version: str | None = None                   # 2.28.9+cuda13.0
    cuda_driver_version: int | None = None
    network: str | None = None                   # `Using network IB` -> IB
    net_devices: tuple[NetDevice, ...] = ()
    gdr: tuple[GdrState, ...] = ()
    connections: tuple[ChannelConnection, ...] = ()
    ring_channels: int | None = None             # NN of `Channel 00/NN : 0 1`
    coll_channels: int | None = None             # `24 coll channels, ...`
    nvls_channels: int | None = None
    graphs: tuple[SearchedGraph, ...] = ()
    gpu_paths: dict[tuple[str, str], str] = field(default_factory=dict)   # (GPU/0-60, GPU/0-70) -> NVL
    environment: dict[str, str] = field(default_factory=dict)             # NCCL_* set by environment
    ranks: int | None = None
    nodes: int | None = None
    init_complete: bool = False
    warnings: tuple[LogLine, ...] = ()
    errors: tuple[LogLine, ...] = ()             # WARN lines and `... -> N` error propagation

    @property
    def transport_kinds(self) -> tuple[str, ...]:
        """Transport families used by the channels, most used first."""
        counts: dict[str, int] = {}
        for connection in self.connections:
            counts[connection.kind] = counts.get(connection.kind, 0) + 1
        return tuple(sorted(counts, key=lambda kind: (-counts[kind], kind)))

    @property
    def channels(self) -> int | None:
        """Channels NCCL runs collectives on: the coll count, else the ring count, else those connected."""
        if self.coll_channels is not None:
            return self.coll_channels
        if self.ring_channels is not None:
            return self.ring_channels
        seen = {connection.channel for connection in self.connections}
        return len(seen) if seen else None

    def gdr_enabled(self, plugin: str = "IB") -> bool | None:
        """GPUDirect RDMA on the given network plugin: True if any HCA has it, None if not stated.

        Channel lines (`via NET/IB/0/GDRDMA`) decide when present: newer NCCL omits the
        per-HCA line, and the per-HCA line says what is possible, the channel what is used.
        """
        used = [connection.gdr for connection in self.connections if connection.kind == f"NET/{plugin}"]
        if used:
            return any(used)
        stated = [state.enabled for state in self.gdr if state.plugin == plugin]
        return any(stated) if stated else None

    @property
    def nvlink_between_gpus(self) -> bool | None:
        """Whether NCCL's topology search put the GPUs on NVLink (ring graph type `NVL/...`)."""
        if self.graphs:
            return any(graph.path_type.startswith("NVL") for graph in self.graphs)
        gpu_links = [path for (first, second), path in self.gpu_paths.items()
                     if first.startswith("GPU/") and second.startswith("GPU/") and first != second]
        if gpu_links:
            return all(path.startswith("NV") for path in gpu_links)
        return None


def split_log_lines(text: str) -> tuple[list[LogLine], list[tuple[int, str]]]:
    """Separate NCCL log messages from everything else.

    Returns the log messages and the remaining (line number, text) pieces: the text of a
    line before a glued prefix, and lines that carry no NCCL prefix at all. A line with
    no prefix right after a WARN continues that WARN (NCCL wraps long messages).
    """
    messages: list[LogLine] = []
    rest: list[tuple[int, str]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip("\r")
        match = _PREFIX.search(line)
        if match:
            before = line[:match.start()]
            if before.strip():
                rest.append((number, before))
            messages.append(LogLine(number, match["level"], match["message"].strip(), match["host"], int(match["pid"]),
                                    int(match["device"]), match["location"]))
            continue
        bare = _BARE.match(line)
        if bare:
            messages.append(LogLine(number, bare["level"], bare["message"].strip(), location=bare["location"]))
            continue
        if messages and messages[-1].level == "WARN" and messages[-1].line_number == number - 1 and line.strip() \
                and not line.lstrip().startswith("#"):
            last = messages[-1]
            messages[-1] = LogLine(number - 1, last.level, f"{last.message} {line.strip()}", last.host, last.pid,
                                   last.device, last.location)
            continue
        rest.append((number, line))
    return messages, rest


_VERSION = re.compile(r"^NCCL version (\S+)")
_CUDA_DRIVER = re.compile(r"^cudaDriverVersion (\d+)")
_NETWORK = re.compile(r"^Using network (.+)$")
_USING = re.compile(r"^NET/(\w+) ?: Using (.*)$")
_IB_DEVICE = re.compile(r"\[(\d+)\]([\w.\-]+):(\d+)/(\w+)")
_SOCKET_DEVICE = re.compile(r"\[(\d+)\]([\w.\-]+):([0-9A-Fa-f.:%\w]+)<\d+>")
_GDR = re.compile(r"^NET/(\w+) ?: GPU Direct RDMA (Enabled|Disabled) for HCA (\d+) '([^']*)'")
_CHANNEL = re.compile(
    r"^(?:Channel|Ring) (\d+)(?:/\d+)? : (\d+)(?:\[\w+\])? -> (\d+)(?:\[\w+\])?(?: \[(send|receive)\])? via (.+)$")
_RING_SUMMARY = re.compile(r"^Channel (\d+)/(\d+) :(?: +\d+)+\s*$")
_COLL_CHANNELS = re.compile(r"^(\d+) coll channels, (?:(\d+) collnet channels, )?(?:(\d+) nvls channels)?")
_PATTERN = re.compile(r"^Pattern (\d+), crossNic \d+, nChannels (\d+), bw ([\d.]+)/([\d.]+), type (\S+?),")
_GPU_PATH_LINE = re.compile(r"^(GPU/[\w\-]+) :(.*)$")
_GPU_PATH = re.compile(r"((?:GPU|NVS|CPU|NET|NIC|PCI)/[\w\-]+) \(\d+/[\d.]+/(\w+)\)")
_ENV = re.compile(r"^(NCCL_\w+) set by environment to (.*?)\.?$")
_COMM = re.compile(r"nRanks (\d+) nNodes (\d+)")
_PROPAGATION = re.compile(r"^\S+\.cc:\d+ -> \d+")


def parse_nccl_log(text: str) -> NcclLogFacts:
    """Facts from NCCL's `NCCL_DEBUG=INFO` output (any subsystems; GRAPH adds the topology).

    Sample (NCCL 2.28.9, 2x H200, captured on the device machine)::

        vm:596:596 [0] NCCL INFO NCCL version 2.28.9+cuda13.0
        vm:596:608 [0] NCCL INFO NET/IB : No device found.
        vm:596:608 [0] NCCL INFO NET/Socket : Using [0]eth0:192.0.2.2<0>
        vm:596:608 [0] NCCL INFO Pattern 4, crossNic 0, nChannels 12, bw 30.000000/30.000000, type NVL/PIX, sameChannels 1
        vm:596:608 [0] NCCL INFO Channel 00/24 : 0 1
        vm:596:621 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer
        vm:596:608 [0] NCCL INFO 24 coll channels, 24 collnet channels, 0 nvls channels, 32 p2p channels, 32 p2p channels per peer
    """
    messages, _ = split_log_lines(text)
    if not messages:
        raise NothingToParse("nccl-log", "no NCCL log lines (is NCCL_DEBUG=INFO set?)")
    version = None
    cuda_driver = None
    network = None
    devices: dict[tuple[str, int], NetDevice] = {}
    gdr: dict[tuple[str, int, str], GdrState] = {}
    connections: dict[tuple[int, int, int, str | None], ChannelConnection] = {}
    ring_channels = coll_channels = nvls_channels = ranks = nodes = None
    graphs: list[SearchedGraph] = []
    gpu_paths: dict[tuple[str, str], str] = {}
    environment: dict[str, str] = {}
    init_complete = False
    warnings: list[LogLine] = []
    errors: list[LogLine] = []
    for message in messages:
        body = message.message
        if message.level in ("WARN", "ABORT"):
            warnings.append(message)
            errors.append(message)
            continue
        if _PROPAGATION.match(body):
            errors.append(message)
            continue
        if version is None and (match := _VERSION.match(body)):
            version = match[1]
        elif match := _CUDA_DRIVER.match(body):
            cuda_driver = int(match[1])
        elif match := _NETWORK.match(body):
            network = match[1].strip()
        elif match := _USING.match(body):
            plugin = match[1]
            if plugin == "IB":
                for device in _IB_DEVICE.finditer(match[2]):
                    devices[(plugin, int(device[1]))] = NetDevice(plugin, int(device[1]), device[2], int(device[3]), device[4])
            else:
                for device in _SOCKET_DEVICE.finditer(match[2]):
                    devices[(plugin, int(device[1]))] = NetDevice(plugin, int(device[1]), device[2], address=device[3])
        elif match := _GDR.match(body):
            state = GdrState(match[1], int(match[3]), match[4], match[2] == "Enabled")
            gdr[(state.plugin, state.hca_index, state.device)] = state
        elif match := _CHANNEL.match(body):
            connection = ChannelConnection(int(match[1]), int(match[2]), int(match[3]), match[5].strip(), match[4])
            connections[(connection.channel, connection.source_rank, connection.target_rank, connection.direction)] = connection
        elif match := _RING_SUMMARY.match(body):
            ring_channels = max(ring_channels or 0, int(match[2]))
        elif match := _COLL_CHANNELS.match(body):
            coll_channels = int(match[1])
            if match[3] is not None:
                nvls_channels = int(match[3])
        elif match := _PATTERN.match(body):
            graph = SearchedGraph(int(match[1]), int(match[2]), float(match[3]), float(match[4]), match[5])
            if graph not in graphs:
                graphs.append(graph)
        elif match := _GPU_PATH_LINE.match(body):
            for path in _GPU_PATH.finditer(match[2]):
                gpu_paths[(match[1], path[1])] = path[2]
        elif match := _ENV.match(body):
            environment[match[1]] = match[2].strip()
        elif match := _COMM.search(body):
            ranks, nodes = int(match[1]), int(match[2])
        if "Init COMPLETE" in body:
            init_complete = True
    return NcclLogFacts(
        version=version, cuda_driver_version=cuda_driver, network=network,
        net_devices=tuple(devices[key] for key in sorted(devices)),
        gdr=tuple(gdr[key] for key in sorted(gdr)),
        connections=tuple(connections[key] for key in sorted(connections, key=lambda key: (key[0], key[1], key[2], key[3] or ""))),
        ring_channels=ring_channels, coll_channels=coll_channels, nvls_channels=nvls_channels,
        graphs=tuple(graphs), gpu_paths=gpu_paths, environment=environment, ranks=ranks, nodes=nodes,
        init_complete=init_complete, warnings=tuple(warnings), errors=tuple(errors),
    )


# ---------------------------------------------------------------------------------------
# nccl-tests
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measurement:
    """One half of a result row: out-of-place or in-place."""

    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None = None         # `#wrong` count; None for `N/A`
    error: float | None = None       # old format's `error` column (max error), None for `N/A`


@dataclass(frozen=True)
class NcclTestsRow:
    size: int                        # bytes
    count: int | None
    data_type: str | None            # float, double, ...
    redop: str | None                # sum, ..., None where the column is absent or empty
    root: int | None
    out_of_place: Measurement
    in_place: Measurement | None
    line_number: int


@dataclass(frozen=True)
class NcclTestsRun:
    collective: str | None           # all_reduce_perf (from `Collective test starting`), if printed
    threads: int | None
    gpus_per_thread: int | None
    ranks: int                       # `Rank N` lines under `Using devices`
    rows: tuple[NcclTestsRow, ...]
    avg_busbw_gbps: float | None     # nccl-tests' `Avg bus bandwidth` (mean over every size)
    out_of_bounds: int | None        # `Out of bounds values : N OK|FAILED`
    version: str | None = None       # `nccl-tests version 2.17.8`

    @property
    def largest(self) -> NcclTestsRow | None:
        return max(self.rows, key=lambda row: row.size) if self.rows else None

    @property
    def peak_busbw_gbps(self) -> float | None:
        return max((row.out_of_place.busbw_gbps for row in self.rows), default=None)

    @property
    def wrong(self) -> int:
        """Wrong elements over every row, plus out-of-bounds values: > 0 means a corrupt result."""
        total = self.out_of_bounds or 0
        for row in self.rows:
            for half in (row.out_of_place, row.in_place):
                if half is not None and half.wrong:
                    total += half.wrong
        return total


_HEADER = re.compile(r"^#?\s*nThread (\d+) nGpus (\d+)")
_STARTING = re.compile(r"^#\s*Collective test starting: (\S+)")
_TESTS_VERSION = re.compile(r"^#\s*nccl-tests version (\S+)")
_RANK = re.compile(r"^#?\s*Rank\s+\d+ ")
_COLUMNS = re.compile(r"^#?\s*size\s+(.*)$")
_OUT_OF_BOUNDS = re.compile(r"^#?\s*Out of bounds values\s*:\s*(\d+)")
_AVERAGE = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*([\d.eE+\-]+)")
# A row starts with size, count and data type (`8388608  2097152  float`).
_ROW_START = re.compile(r"^\s*(\d[\d_]*)\s+(\d+)\s+([a-z]\w*)\b")
_SIMPLE_ROW = re.compile(r"^\s*(\d[\d_]*)\s+[\d.]+\s")
_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?(?:[eE][+\-]?\d+)?$")


def _measurement(tokens: list[str], has_wrong: bool, line_number: int) -> Measurement:
    try:
        time_us, algbw, busbw = (float(token) for token in tokens[:3])
    except ValueError as error:
        raise ParseError("nccl-tests", f"expected time, algbw, busbw numbers, got {tokens[:3]}", line_number) from error
    flag = tokens[3] if len(tokens) > 3 else "N/A"
    wrong = error = None
    if flag != "N/A":
        try:
            if has_wrong:
                wrong = int(float(flag))
            else:
                error = float(flag)
        except (ValueError, OverflowError) as failure:   # `inf` does not fit an int
            raise ParseError("nccl-tests", f"expected a #wrong count or error, got {flag!r}", line_number) from failure
    return Measurement(time_us, algbw, busbw, wrong, error)


class _RunBuilder:
    def __init__(self, collective: str | None, version: str | None) -> None:
        self.collective = collective
        self.version = version
        self.threads: int | None = None
        self.gpus: int | None = None
        self.ranks = 0
        self.columns: list[str] = []
        self.rows: list[NcclTestsRow] = []
        self.pending: list[str] = []
        self.pending_line = 0
        self.average: float | None = None
        self.out_of_bounds: int | None = None

    @property
    def simple(self) -> bool:
        """An author-trimmed table: `size time algbw busbw` only."""
        return bool(self.columns) and "count" not in self.columns

    def measurement_tokens(self) -> int:
        return 8 if not self.simple else 3

    def flush(self) -> None:
        if not self.pending:
            return
        tokens, self.pending = self.pending, []
        line = self.pending_line
        try:
            self._add_row(tokens, line)
        except (ValueError, OverflowError) as error:
            # Pieces of two rows glued together by paste damage: not a row we can trust.
            raise ParseError("nccl-tests", f"result row does not parse: {error}", line, " ".join(tokens)) from error

    def _add_row(self, tokens: list[str], line: int) -> None:
        if self.simple:
            # A row cut short by the end of a paste: _measurement reports it as a ParseError.
            self.rows.append(NcclTestsRow(int(tokens[0].replace("_", "")), None, None, None, None,
                                          _measurement(tokens[1:4], False, line), None, line))
            return
        if len(tokens) < 3 + 4:
            raise ParseError("nccl-tests", f"result row has {len(tokens)} fields, expected at least 7", line, " ".join(tokens))
        has_wrong = "#wrong" in self.columns
        size, count, data_type = int(tokens[0].replace("_", "")), int(tokens[1]), tokens[2]
        # The middle holds redop and/or root; old alltoall leaves redop empty.
        measured = tokens[-8:] if len(tokens) >= 11 else tokens[3:]
        middle = tokens[3:len(tokens) - len(measured)]
        redop = next((token for token in middle if not _NUMBER.match(token)), None)
        root_token = next((token for token in middle if _NUMBER.match(token)), None)
        root = int(root_token) if root_token is not None else None
        out_of_place = _measurement(measured[:4], has_wrong, line)
        in_place = _measurement(measured[4:8], has_wrong, line) if len(measured) >= 7 else None
        self.rows.append(NcclTestsRow(size, count, data_type, redop, root, out_of_place, in_place, line))

    def complete(self) -> bool:
        if not self.pending:
            return False
        needed = (1 + self.measurement_tokens()) if self.simple else None
        if needed is not None:
            return len(self.pending) >= needed
        return len(self.pending) >= len(self.columns) or len(self.pending) >= 13

    def build(self) -> NcclTestsRun:
        self.flush()
        return NcclTestsRun(self.collective, self.threads, self.gpus, self.ranks, tuple(self.rows), self.average,
                            self.out_of_bounds, self.version)


def parse_nccl_tests(text: str) -> list[NcclTestsRun]:
    """Every run (one per collective) in nccl-tests output, NCCL INFO lines and paste damage tolerated.

    Sample (nccl-tests 2.17.8, H100)::

        # nccl-tests version 2.17.8 nccl-headers=22902 nccl-library=22902
        # Collective test starting: all_reduce_perf
        # nThread 1 nGpus 1 minBytes 33554432 maxBytes 68719476736 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
        #  Rank  0 Group  0 Pid 2627782 on cnode3-002 device  0 [0000:1b:00] NVIDIA H100 80GB HBM3
        #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
            33554432       4194304    double     sum      -1   798.52   42.02   83.06      0   788.24   42.57   84.15      0
        # Out of bounds values : 0 OK
        # Avg bus bandwidth    : 265.619
    """
    _, pieces = split_log_lines(text)
    runs: list[NcclTestsRun] = []
    current: _RunBuilder | None = None
    collective: str | None = None
    version: str | None = None
    for number, piece in pieces:
        stripped = piece.strip()
        if not stripped:
            continue
        if match := _TESTS_VERSION.match(stripped):
            version = match[1]
            continue
        if match := _STARTING.match(stripped):
            if current is not None:
                runs.append(current.build())
                current = None
            collective = match[1]
            continue
        if match := _HEADER.match(stripped):
            if current is not None:
                runs.append(current.build())
            current = _RunBuilder(collective, version)
            current.threads, current.gpus = int(match[1]), int(match[2])
            collective = None
            continue
        if match := _COLUMNS.match(stripped):
            if current is None:
                current = _RunBuilder(collective, version)
                collective = None
            current.flush()
            current.columns = ["size", *match[1].split()]
            continue
        if current is None:
            continue
        if _RANK.match(stripped):
            current.ranks += 1
            continue
        if match := _OUT_OF_BOUNDS.match(stripped):
            current.flush()
            current.out_of_bounds = int(match[1])
            continue
        if match := _AVERAGE.match(stripped):
            current.flush()
            try:
                current.average = float(match[1])
            except ValueError as error:      # the pattern admits `1.2.3` and `e-`
                raise ParseError("nccl-tests", f"average bus bandwidth {match[1]!r} is not a number", number, piece) from error
            continue
        if stripped.startswith("#") or not current.columns:
            continue
        starts_row = _ROW_START.match(piece) if not current.simple else _SIMPLE_ROW.match(piece)
        if starts_row:
            current.flush()
            current.pending = piece.split()
            current.pending_line = number
        elif current.pending and all(_NUMBER.match(token) or token == "N/A" for token in stripped.split()):
            # The rest of a row that an INFO line cut in two.
            current.pending.extend(stripped.split())
        else:
            continue
        if current.complete():
            current.flush()
    if current is not None:
        runs.append(current.build())
    runs = [run for run in runs if run.rows or run.avg_busbw_gbps is not None]
    if not runs:
        raise NothingToParse("nccl-tests", "no nccl-tests result table found")
    return runs
