"""Parser for NCCL's own debug output (`NCCL_DEBUG=INFO`): version, transports, GDR, channels.

Pure: text in, frozen records out. NCCL lines interleave arbitrarily between threads and
ranks, and share a stream with other output (nccl-tests tables, a worker's own lines), so
`split_log_lines` first separates NCCL's lines from the rest (netdoctor.parsers.nccl_tests too).

Cloud network plugins are read too: AWS's aws-ofi-nccl (`Using network AWS Libfabric` up to
plugin 1.11, `Libfabric` from 1.13; `NET/OFI` lines), GCP's GPUDirect-TCPX
(`GPUDirectTCPX_v7`) and GPUDirect-TCPXO (`FasTrak`); `network_kind` names the family.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import field

from netdoctor.errors import NothingToParse
from netdoctor.records import record

# `host:pid:tid [dev] [file.cc:line] NCCL LEVEL message`; the location part appears on WARN
# lines. nccl-tests rows may have the prefix glued to their end (`... -1mew0:65704:...`),
# so the host must start with a letter to be told apart from the row's last number.
# Net plugins print a C++ signature as the location: `int nccl_net_ofi_create_plugin(...):208`.
_SIGNATURE = r"(?:[\w:<>*&]+ ){0,3}[\w:<>~]+\([^()]*\):\d+"
_PREFIX = re.compile(
    r"(?P<host>[A-Za-z][\w.\-]*):(?P<pid>\d+):(?P<tid>\d+) \[(?P<device>\d+)\] "
    rf"(?:(?P<location>{_SIGNATURE}|\S+) )?NCCL (?P<level>INFO|WARN|TRACE|ABORT) ?(?P<message>.*)$"
)
# Authors often quote lines with the prefix trimmed: `NCCL INFO NET/IB : Using ...`, or
# down to the device: `[0] NCCL INFO NET/GPUDirectTCPX : ...`.
_BARE = re.compile(rf"^\s*(?:\[(?P<device>\d+)\] )?(?:(?P<location>{_SIGNATURE}|\S+\.cc:\d+) )?"
                   r"NCCL (?P<level>INFO|WARN|TRACE|ABORT) (?P<message>.*)$")


@record(frozen=True)
class LogLine:
    line_number: int                 # 1-based, of the physical line where the message starts
    level: str                       # INFO | WARN | TRACE | ABORT
    message: str                     # continuation lines of a wrapped WARN are joined with a space
    host: str | None = None
    pid: int | None = None
    device: int | None = None
    location: str | None = None      # `transport/net_ib.cc:1296` on WARN lines


@record(frozen=True)
class ChannelConnection:
    """`Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer/read` (or old `Ring 00 : 3 -> 10 ...`)."""

    channel: int
    source_rank: int
    target_rank: int
    via: str                         # the transport text as printed
    direction: str | None = None     # send | receive (network connections only)
    host: str | None = None          # the host of the line (multi-node logs)

    @property
    def kind(self) -> str:
        """P2P, SHM, NET/IB, NET/Socket, NET/Libfabric, NET/GPUDirectTCPX, NET/FasTrak, COLLNET, ...

        The transport family. aws-ofi-nccl's older names (`AWS Libfabric`, `OFI`) read as
        `NET/Libfabric`, and TCPX's versioned `GPUDirectTCPX_v7` as `NET/GPUDirectTCPX`.
        """
        parts = self.via.split("/")
        if parts[0] == "NET" and len(parts) > 1:
            return f"NET/{_net_name(parts[1])}"
        return parts[0]

    @property
    def gdr(self) -> bool | None:
        """GPUDirect RDMA for a network connection (`/GDRDMA`, newer NCCL `/GDRDMA(PCI)`); None off the network."""
        if not self.kind.startswith("NET/"):
            return None
        return any(part.startswith("GDRDMA") for part in self.via.split("/"))


@record(frozen=True)
class NetDevice:
    """One entry of `NET/IB : Using [0]mlx5_0:1/IB ...` or `NET/Socket : Using [0]eth0:10.0.0.23<0>`."""

    plugin: str                      # IB, Socket, FastSocket, ...
    index: int
    name: str                        # mlx5_0, eth0
    port: int | None = None
    link_layer: str | None = None    # IB | RoCE (IB plugin); None for sockets
    address: str | None = None       # socket plugins: the IP address


@record(frozen=True)
class GdrState:
    """`NET/IB : GPU Direct RDMA Enabled|Disabled for HCA 0 'mlx5_0'`, or the per-GPU form
    `GPU Direct RDMA Disabled for GPU 2[2] / HCA 0 (distance 3 >= 2)` (device name unknown: "")."""

    plugin: str
    hca_index: int
    device: str
    enabled: bool
    host: str | None = None


@record(frozen=True)
class CollNetConnection:
    """`CollNet 00/0 : 0 [receive] via COLLNET/SHARP/1/GDRDMA`: in-network reduction (SHARP) in use."""

    channel: int
    rank: int
    via: str
    host: str | None = None


@record(frozen=True)
class SearchedGraph:
    """`Pattern 4, crossNic 0, nChannels 12, bw 30.000000/30.000000, type NVL/PIX, sameChannels 1`."""

    pattern: int
    channels: int
    bandwidth_intra: float
    bandwidth_inter: float
    path_type: str                   # NVL/PIX, PHB/PIX, SYS/PIX, ...


@record(frozen=True)
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
    net_plugin: str | None = None                # external plugin loaded: its path or name
    net_plugin_missing: bool = False             # NCCL looked for libnccl-net.so and found none
    net_plugin_version: str | None = None        # aws-ofi-nccl 1.14.2, GPUDirectTCPX 3.1.8, FasTrak 1.0.17
    collnet: tuple[CollNetConnection, ...] = ()
    sharp_initialized: bool = False              # `SHARP rank 0/4 initialized on mlx5_0:1`
    algorithms: dict[int, str] = field(default_factory=dict)             # bytes -> RING/TREE/COLLNET_DIRECT/NVLS (TUNING)
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

    def net_transport(self) -> str | None:
        """The network transport as one name: `NET/IB/GDRDMA`, `NET/IB`, `NET/Socket`, ... (None: no NET channel).

        GDRDMA only where every network channel used it; a mix (one node without GPUDirect)
        is the slower `NET/IB`, and `gdr_hosts` says which hosts lacked it.
        """
        net = [connection for connection in self.connections if connection.kind.startswith("NET/")]
        if not net:
            return None
        kinds = sorted({connection.kind for connection in net}, key=lambda kind: (kind != "NET/IB", kind))
        kind = kinds[0]
        if all(connection.gdr for connection in net if connection.kind == kind):
            return f"{kind}/GDRDMA"
        return kind

    def network_used(self) -> str | None:
        """`net_transport()`, else the network NCCL chose (`Using network Socket` -> `NET/Socket`)
        where the log shows no channel line (a short or cut log)."""
        return self.net_transport() or (f"NET/{_net_name(self.network)}" if self.network else None)

    def gdr_hosts(self) -> dict[str, bool]:
        """Per host (of the log's line prefixes), whether all its network channels used GPUDirect RDMA."""
        hosts: dict[str, bool] = {}
        for connection in self.connections:
            if connection.host is None or not connection.kind.startswith("NET/"):
                continue
            hosts[connection.host] = hosts.get(connection.host, True) and bool(connection.gdr)
        return hosts

    def in_network_algorithm(self, sizes: Iterable[int] | None = None) -> str | None:
        """The in-network algorithm (CollNet/NVLS) NCCL chose for a collective of one of `sizes`
        bytes (any size it logged, when None): the one of the largest such size; None when NCCL
        chose none, or its TUNING lines are not in the log."""
        chosen = [(size, algorithm) for size, algorithm in self.algorithms.items()
                  if algorithm in IN_NETWORK_ALGORITHMS and (sizes is None or size in sizes)]
        return max(chosen)[1] if chosen else None

    @property
    def sharp_used(self) -> bool:
        """In-network reduction carried a measured collective: NCCL's TUNING line names CollNet or
        NVLS for it. CollNet channels connected, or `SHARP rank N/M initialized`, only say SHARP
        could have been used (`sharp_initialized`, `collnet`): NCCL may still choose RING/TREE."""
        return self.in_network_algorithm() is not None

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


_NET_ALIASES = {"AWS Libfabric": "Libfabric", "OFI": "Libfabric"}
_NETWORK_KINDS = {"IB": "ib", "Socket": "socket", "FastSocket": "socket", "Libfabric": "ofi",
                  "GPUDirectTCPX": "tcpx", "FasTrak": "tcpxo"}


def _net_name(name: str) -> str:
    """One spelling per network plugin: `AWS Libfabric`/`OFI` -> Libfabric, `GPUDirectTCPX_v7` -> GPUDirectTCPX."""
    if name.startswith("GPUDirectTCPX"):
        return "GPUDirectTCPX"
    return _NET_ALIASES.get(name, name)


def network_kind(transport: str | None) -> str | None:
    """The family of a network transport: "ib", "socket", "ofi", "tcpx", "tcpxo", or None.

    Takes `NcclLogFacts.net_transport()` (`NET/Libfabric/GDRDMA`) or a `Using network` name
    (`facts.network`: `IB`, `IBext_v8`, `Socket`, `AWS Libfabric`, `Libfabric`,
    `GPUDirectTCPX_v7`, `FasTrak`). "ib" is NCCL's verbs transport (InfiniBand or RoCE) and
    the SHARP plugin's `IBext`; "socket" is TCP (`Socket`, Google's `FastSocket`); "ofi" is
    aws-ofi-nccl (EFA); "tcpx"/"tcpxo" are GCP GPUDirect-TCPX / -TCPXO (FasTrak). None for
    None or a name not listed here.
    """
    if not transport:
        return None
    name = _net_name(transport.removeprefix("NET/").split("/")[0].strip())
    return "ib" if name.startswith("IBext") else _NETWORK_KINDS.get(name)


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
            device = int(bare["device"]) if bare["device"] else None
            messages.append(LogLine(number, bare["level"], bare["message"].strip(), device=device,
                                    location=bare["location"]))
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
_GDR_GPU = re.compile(r"^(?:NET/(\w+) ?: )?GPU Direct RDMA (Enabled|Disabled) for GPU \S+ / HCA (\d+)")
_COLLNET = re.compile(r"^CollNet (\d+)(?:/\d+)? : (\d+)(?: \[(?:send|receive)\])? via (.+)$")
_SHARP_RANK = re.compile(r"^SHARP rank \d+/\d+ initialized")
_PLUGIN_PATH = re.compile(r"^(?:Plugin Path : |Successfully loaded external plugin |NET/Plugin ?: Loaded net plugin )(.+?)\s*$")
_PLUGIN_MISSING = re.compile(r"^NET/Plugin ?: (?:No plugin found|Could not find:?) ?\(?libnccl-net")
# TUNING, rank 0, per collective (src/enqueue.cc): `AllReduce: 8388608 Bytes -> Algo RING proto SIMPLE ...` (2.24+),
# `AllReduce: 8388608 Bytes -> Algo 1 proto 2 time 96.3` (2.23), without `AllReduce: ` before.
_ALGO = re.compile(r"^(?:\w+: )?(\d+) Bytes -> Algo (\w+) proto")
# NCCL_ALGO_* (src/include/plugin/nccl_tuner.h; nccl_common.h before 2.24): the numbers older logs print.
ALGORITHM_NAMES = ("TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT")
# Reduction in the network: CollNet (the SHARP plugin, IB switches), NVLS (NVLink SHARP, NVSwitch), NVLS_TREE both.
IN_NETWORK_ALGORITHMS = frozenset({"COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE"})
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
# Network plugin versions: aws-ofi-nccl (`Using aws-ofi-nccl 1.4.0aws` before 1.5), TCPX
# (`ver. 3.1.8.`: the trailing dot ends an empty suffix), TCPXO (`NET/FasTrak <time>: ...`).
_PLUGIN_VERSION = re.compile(r"^(?:NET/OFI (?:Initializing|Using) aws-ofi-nccl (\S+)"
                             r"|NET/GPUDirectTCPX ver\. (\S+?)\.?"
                             r"|NET/FasTrak \S+: Initializing network FasTrak, version: (\S+))$")
_PLUGIN_NAMES = ("aws-ofi-nccl", "GPUDirectTCPX", "FasTrak")   # in the order of _PLUGIN_VERSION's groups


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
    gdr: dict[tuple[str, int, str, str], GdrState] = {}
    connections: dict[tuple[int, int, int, str | None, str | None], ChannelConnection] = {}
    ring_channels = coll_channels = nvls_channels = ranks = nodes = None
    graphs: list[SearchedGraph] = []
    gpu_paths: dict[tuple[str, str], str] = {}
    environment: dict[str, str] = {}
    net_plugin: str | None = None
    net_plugin_missing = False
    plugin_version: str | None = None
    collnet: list[CollNetConnection] = []
    sharp_initialized = False
    algorithms: dict[int, str] = {}
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
        elif match := _PLUGIN_VERSION.match(body):
            plugin_version = plugin_version or next(f"{name} {group}" for name, group
                                                    in zip(_PLUGIN_NAMES, match.groups()) if group)
        elif match := _USING.match(body):
            plugin = match[1]
            if plugin == "IB":
                for device in _IB_DEVICE.finditer(match[2]):
                    devices[(plugin, int(device[1]))] = NetDevice(plugin, int(device[1]), device[2], int(device[3]), device[4])
            else:
                for device in _SOCKET_DEVICE.finditer(match[2]):
                    devices[(plugin, int(device[1]))] = NetDevice(plugin, int(device[1]), device[2], address=device[3])
        elif match := _GDR.match(body):
            state = GdrState(match[1], int(match[3]), match[4], match[2] == "Enabled", message.host)
            gdr[(state.plugin, state.hca_index, state.device, state.host or "")] = state
        elif match := _GDR_GPU.match(body):
            state = GdrState(match[1] or "IB", int(match[3]), "", match[2] == "Enabled", message.host)
            gdr[(state.plugin, state.hca_index, state.device, state.host or "")] = state
        elif match := _CHANNEL.match(body):
            connection = ChannelConnection(int(match[1]), int(match[2]), int(match[3]), match[5].strip(), match[4],
                                           message.host)
            connections[(connection.channel, connection.source_rank, connection.target_rank, connection.direction,
                         connection.host)] = connection
        elif match := _COLLNET.match(body):
            collnet.append(CollNetConnection(int(match[1]), int(match[2]), match[3].strip(), message.host))
        elif _SHARP_RANK.match(body):
            sharp_initialized = True
        elif match := _PLUGIN_PATH.match(body):
            net_plugin = net_plugin or match[1]
        elif _PLUGIN_MISSING.match(body):
            net_plugin_missing = True
        elif match := _ALGO.match(body):
            name = match[2].upper()
            algorithms[int(match[1])] = (ALGORITHM_NAMES[int(name)] if name.isdigit() and int(name) < len(ALGORITHM_NAMES)
                                         else name)
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
        connections=tuple(connections[key] for key in sorted(
            connections, key=lambda key: (key[0], key[1], key[2], key[3] or "", key[4] or ""))),
        ring_channels=ring_channels, coll_channels=coll_channels, nvls_channels=nvls_channels,
        graphs=tuple(graphs), gpu_paths=gpu_paths, environment=environment, net_plugin=net_plugin,
        net_plugin_missing=net_plugin_missing and net_plugin is None, net_plugin_version=plugin_version,
        collnet=tuple(collnet),
        sharp_initialized=sharp_initialized, algorithms=algorithms, ranks=ranks, nodes=nodes,
        init_complete=init_complete, warnings=tuple(warnings), errors=tuple(errors),
    )
