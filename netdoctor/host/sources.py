"""The sources of facts about a node, one row each: what to run, how, and for which needs.

A row says everything about collecting one source: its snapshot command NAME
(CONTRACT section 4; a template such as `perfquery-x-{dev}-{port}` for per-device
tools), the argument list (the same template fields), which parser reads its output,
its timeout, whether a snapshot records it, whether it needs root, whether it sweeps the
whole fabric (only with `--fabric-scan`) and which check needs (the closed vocabulary
`netdoctor.checks.api.NEEDS`) it serves. The inventory's discovery plan
(`netdoctor.inventory.plan`) reads this table; nothing else lists tools.

The parser is named by a dotted path (`netdoctor.parsers.ibstat:parse_ibstat`), not
imported: host imports nothing above it, yet the row stays whole, so adding a source is
one row here plus one parser (plus the joiner that puts its facts into the inventory,
keyed by the row's name in `netdoctor.inventory.from_tools`). The inventory resolves the
path; a test resolves every row's parser and checks every row has a joiner.

Readers (`sysfs`, `netdevs`, `nvml`) are rows without an argument list: the host reads
them in-process (NodeSource.sys / netdevs() / nvml()), but they are planned like tools.

Each row also carries its budget (`max_output_bytes`, `max_lines`; netdoctor.host.budgets):
the live runner's cap for the tool's stdout and the most a snapshot's `commands/NAME.out`
(or `nvml.json`, `nccl-env.json`) may hold; past it the source is "too large" and not parsed.
Budgets are engineering defaults, not thresholds: sized from what a big real node produces
(in the comment beside each row) with a margin of ten times or more.
"""

from __future__ import annotations


from netdoctor.host.types import CommandSpec
from netdoctor.records import record
from netdoctor.vocabulary import StrEnum

KiB, MiB = 1 << 10, 1 << 20
# A row that names no budget: the runner's long-standing 4 MiB stdout cap; no node tool's
# output comes near it (the largest, ibv_devinfo -v of 16 devices, is ~40 KB).
DEFAULT_MAX_OUTPUT_BYTES = 4 * MiB
DEFAULT_MAX_LINES = 100_000


class Scope(StrEnum):
    """What one row expands over; the inventory decides which devices qualify."""

    NODE = "node"                # run once per node
    IB_PORT = "ib-port"          # once per InfiniBand port: fields {dev}, {port}
    ROCE_NETDEV = "roce-netdev"  # once per RoCE netdev (the slaves of a RoCE bond): field {netdev}
    RDMA_DEVICE = "rdma-device"  # once per RDMA device with a PCI function of its own (no VF, not EFA): field {dev}
    EFA = "efa"                  # once per node that has an AWS EFA device


@record(frozen=True)
class Source:
    """One source of facts. `needs` empty: collected whatever the checks need."""

    name: str                          # snapshot command NAME, or its template
    argv: tuple[str, ...] = ()         # () for an in-process reader
    parser: str | None = None          # "module:function" under netdoctor.parsers
    needs: frozenset[str] = frozenset()   # the needs it serves directly (plan.IMPLIED_NEEDS adds the rest)
    scope: Scope = Scope.NODE
    timeout_s: float = 5.0
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES   # stdout budget: reaching it is too large
    in_snapshot: bool = True           # recorded by `netdoctor capture`, read back from snapshots
    root: bool = False                 # gives full facts only as root (informational: it still runs)
    fabric: bool = False               # sweeps the whole fabric: only with --fabric-scan
    answer_on_stderr: bool = False     # a failure with only stderr may still be an answer its parser reads
    max_lines: int = DEFAULT_MAX_LINES  # line budget: more lines is too large

    @property
    def is_command(self) -> bool:
        return bool(self.argv)

    def serves(self, needs: frozenset[str] | None) -> bool:
        """Collected for these needs? None: everything is collected."""
        return needs is None or not self.needs or bool(self.needs & needs)

    def expand(self, **fields: str | int) -> CommandSpec:
        """The command for one device: `expand(dev="mlx5_0", port=1)` -> perfquery-x-mlx5_0-1."""
        values = {key: str(value) for key, value in fields.items()}
        return CommandSpec(self.name.format(**values), tuple(arg.format(**values) for arg in self.argv),
                           timeout_s=self.timeout_s, max_output_bytes=self.max_output_bytes, recorded=self.in_snapshot,
                           max_lines=self.max_lines)


def _needs(*names: str) -> frozenset[str]:
    return frozenset(names)


_RDMA = _needs("rdma")
# UnitFileState since 0.3 (is the unit meant to run here?): the contract's list plus one property.
_UNIT_PROPERTIES = "ActiveState,SubState,Result,NRestarts,ActiveEnterTimestamp,UnitFileState"

# Table order is the order of trust: sysfs > NVML > tools; among tools, the first row's
# value stands and later ones that differ are recorded as conflicts. iblinkinfo comes
# after the node tools because it matches fabric lines against their GUIDs and LIDs.
SOURCES: tuple[Source, ...] = (
    Source("sysfs"),
    Source("netdevs"),
    # nvml.json of 8 GPUs with 18 NVLinks each is ~50 KB; only its size is budgeted (no lines).
    Source("nvml", needs=_needs("gpus", "pcie"), max_output_bytes=4 * MiB),
    # nccl-env.json is a few KB: the kernel caps one variable at 128 KiB (MAX_ARG_STRLEN),
    # NCCL's config files are read up to 64 KiB each.
    # NCCL_IB_TC decides the priority RoCE traffic lands on (pfc-ecn, need `roce`).
    Source("nccl-env", needs=_needs("nccl-env", "efa", "roce"), max_output_bytes=1 * MiB),
    # ibstat: ~30 lines per CA; 16 CAs, or 8 ports with SR-IOV VFs (~140 CAs), ~4,000 lines.
    Source("ibstat", ("ibstat",), "netdoctor.parsers.ibstat:parse_ibstat", _RDMA,
           max_output_bytes=2 * MiB, max_lines=50_000),
    # ibv_devinfo -v: ~2.4 KB (~100 lines) per device; ~140 devices with VFs, ~14,000 lines.
    Source("ibv_devinfo-v", ("ibv_devinfo", "-v"), "netdoctor.parsers.ibv_devinfo:parse_ibv_devinfo", _RDMA,
           max_output_bytes=4 * MiB, max_lines=100_000),
    # One line per port: ~140 with VFs.
    Source("ibdev2netdev", ("ibdev2netdev",), "netdoctor.parsers.ibdev2netdev:parse_ibdev2netdev", _RDMA,
           max_output_bytes=256 * KiB, max_lines=5_000),
    # nvidia-smi also names GPUs NVML cannot, and its hang tells a wedged driver from a GPU-less node.
    # The matrix is (GPUs + NICs) square plus a legend: 8 GPUs and 18 NICs, ~50 lines, 4 KB.
    Source("nvidia-smi-topo-m", ("nvidia-smi", "topo", "-m"), "netdoctor.parsers.nvidia_smi_topo:parse_nvidia_smi_topo",
           _needs("gpus", "topology"), timeout_s=8.0, max_output_bytes=256 * KiB, max_lines=2_000),
    # Each interface's IP addresses (sysfs holds none): NCCL finds NCCL_SOCKET_IFNAME's interfaces
    # only through an address; nvswitch-fabric finds this node among `nvidia-imex-ctl -N`'s nodes by
    # one. One JSON line, ~600 bytes per interface: a DGX ~20 interfaces, 12 KB; a Kubernetes node
    # with 2,000 veths ~1.2 MB.
    Source("ip-j-addr", ("ip", "-j", "address", "show"), "netdoctor.parsers.ip_addr:parse_ip_addr_json",
           _needs("nccl-env", "fabric"), timeout_s=3.0, max_output_bytes=8 * MiB, max_lines=1_000),
    # The only source of "could be" hints for degraded links. It sends SMPs to every
    # switch, so thousands of nodes running it at once in a prolog load the SM. A
    # 2,000-switch fabric prints ~15 MB (~150,000 lines); the cap keeps a runaway tool's memory bounded.
    Source("iblinkinfo", ("iblinkinfo",), "netdoctor.parsers.iblinkinfo:parse_iblinkinfo", _RDMA,
           timeout_s=8.0, max_output_bytes=24 * MiB, max_lines=300_000, root=True, fabric=True),
    # Counters sysfs lacks; port-state (need `rdma`) also reads them to tell a never-linked port.
    Source("perfquery-x-{dev}-{port}", ("perfquery", "-x", "-C", "{dev}", "-P", "{port}"),
           "netdoctor.parsers.perfquery:parse_perfquery", _needs("counters", "rdma"), Scope.IB_PORT, timeout_s=4.0, root=True,
           max_output_bytes=64 * KiB, max_lines=1_000),     # ~40 lines, 1.5 KB
    # PFC/trust of RoCE netdevs: pfc-ecn (need `roce`) judges them.
    Source("mlnx_qos-{netdev}", ("mlnx_qos", "-i", "{netdev}"), "netdoctor.parsers.mlnx_qos:parse_mlnx_qos",
           _needs("roce", "qos"), Scope.ROCE_NETDEV, timeout_s=4.0, root=True,
           max_output_bytes=64 * KiB, max_lines=1_000),     # ~40 lines, 1 KB
    # A second source of NVLink state and speed, for drivers whose NVML gives no per-link facts.
    # 8 GPUs x 18 links plus a line per GPU: ~160 lines (~200 on any node), 4 KB.
    Source("nvidia-smi-nvlink-s", ("nvidia-smi", "nvlink", "-s"),
           "netdoctor.parsers.nvidia_smi_nvlink:parse_nvidia_smi_nvlink_status", _needs("nvlink"), timeout_s=8.0,
           max_output_bytes=1 * MiB, max_lines=10_000),
    # The NVLink domain (nvswitch-fabric, need `fabric`; CONTRACT 8). The IMEX domain as this node's
    # daemon sees it: its nodes, their connection matrix and `Domain State`. An 18-tray NVL72 prints
    # ~50 lines, 3.4 KB (tests/data/corpus/nvidia-imex-ctl); a 144-node domain ~170 lines of ~600
    # characters, ~100 KB. Not installed off NVL72 racks (missing, not judged there).
    Source("nvidia-imex-ctl-N", ("nvidia-imex-ctl", "-N"), "netdoctor.parsers.nvidia_imex_ctl:parse_nvidia_imex_ctl",
           _needs("fabric"), timeout_s=5.0, max_output_bytes=1 * MiB, max_lines=10_000),
    # A second source of each GPU's fabric state, clique, cluster UUID, fabric health, platform info
    # and recovery action, where NVML (or its bindings) gave none. ~250 lines, 14 KB per GPU (the
    # device tool's 2x H200: 506 lines, 28 KB); 8 GPUs ~2,000 lines, 115 KB, plus ~7 lines per process.
    Source("nvidia-smi-q", ("nvidia-smi", "-q"), "netdoctor.parsers.nvidia_smi_q:parse_nvidia_smi_q", _needs("fabric"),
           timeout_s=10.0, max_output_bytes=4 * MiB, max_lines=50_000),
    # This boot's kernel log with absolute times: kernel-events (need `kernel-log`) judges
    # Xids, SXids, link flaps and AER. Root where kernel.dmesg_restrict=1 (most distributions).
    # A long-running 8-GPU node logs a few MB (~50,000 lines); the ring buffer itself is
    # 256 KiB-2 MiB by default and rarely set past 32 MiB (log_buf_len). The parser reads at
    # most its newest 20,000 event lines (netdoctor.parsers.kernel_log.MAX_EVENT_LINES).
    Source("dmesg", ("dmesg", "--time-format", "iso"), "netdoctor.parsers.kernel_log:parse_kernel_log",
           _needs("kernel-log"), timeout_s=5.0, max_output_bytes=32 * MiB, max_lines=500_000, root=True),
    # The NVSwitch fabric's services: nvswitch-fabric (need `fabric`) judges them.
    *(Source(f"systemctl-show-{unit}", ("systemctl", "show", unit, "-p", _UNIT_PROPERTIES),
             "netdoctor.parsers.systemctl:parse_systemctl_show", _needs("fabric"), timeout_s=4.0,
             max_output_bytes=64 * KiB, max_lines=1_000)     # 5 lines
      for unit in ("nvidia-fabricmanager", "nvidia-imex")),
    # Port modules: temperature, per-lane bias and optical power with the module's own limits
    # (transceiver, need `transceiver`). mlxlink (MFT, root) reads every port; ethtool -m
    # (root) is the second source on RoCE netdevs.
    # Each ~60-120 lines (8 lanes of an OSFP module), 3 KB.
    Source("mlxlink-m-{dev}", ("mlxlink", "-d", "{dev}", "-m"), "netdoctor.parsers.transceiver:parse_mlxlink_module",
           _needs("transceiver"), Scope.RDMA_DEVICE, timeout_s=8.0, root=True, max_output_bytes=256 * KiB, max_lines=5_000),
    Source("ethtool-m-{netdev}", ("ethtool", "-m", "{netdev}"), "netdoctor.parsers.transceiver:parse_ethtool_module",
           _needs("transceiver"), Scope.ROCE_NETDEV, timeout_s=4.0, root=True, max_output_bytes=256 * KiB,
           max_lines=5_000),
    # The physical layer under the port state (phy, need `phy`): BER before and after FEC, per-lane
    # errors, symbol errors and link recoveries since the last counter clear, as the firmware counts
    # them (mlxlink -c: five sections, ~50 lines, 3 KB); on RoCE netdevs the driver's PHY, pause and
    # per-priority counters since it loaded (ethtool -S: ~300 lines plus ~60 per channel; 128
    # channels ~8,000 lines, 300 KB).
    Source("mlxlink-c-{dev}", ("mlxlink", "-d", "{dev}", "-c"), "netdoctor.parsers.mlxlink_counters:parse_mlxlink_counters",
           _needs("phy"), Scope.RDMA_DEVICE, timeout_s=8.0, root=True, max_output_bytes=256 * KiB, max_lines=5_000),
    Source("ethtool-S-{netdev}", ("ethtool", "-S", "{netdev}"), "netdoctor.parsers.ethtool_stats:parse_ethtool_stats",
           _needs("phy"), Scope.ROCE_NETDEV, timeout_s=4.0, max_output_bytes=4 * MiB, max_lines=100_000),
    # ACS/ATS of the bridges on GPU/NIC paths where the sysfs config space was not read
    # whole (not root when captured); also what a support bundle is expected to hold.
    # ~400 PCI functions of a DGX (switches, NVSwitches, NICs, NVMe) x ~50 lines: ~1 MB, 20,000 lines.
    Source("lspci-vvv", ("lspci", "-vvv", "-D"), "netdoctor.parsers.lspci:parse_lspci_vvv", _needs("pcie-tree"),
           timeout_s=8.0, max_output_bytes=16 * MiB, max_lines=300_000, root=True),
    # AWS EFA: libfabric's view of the devices (the efa provider NCCL's aws-ofi-nccl plugin
    # needs; gpudirect judges it). Runs only where sysfs named an EFA device.
    # With no usable efa provider fi_getinfo fails and fi_info says `fi_getinfo: -61` on stderr:
    # that is the answer "libfabric cannot open EFA", not a broken tool. p5: 32 devices x 2
    # endpoint types x ~15 lines, ~1,000 lines.
    Source("fi_info-p-efa", ("fi_info", "-p", "efa"), "netdoctor.parsers.fi_info:parse_fi_info", _needs("efa"), Scope.EFA,
           timeout_s=5.0, max_output_bytes=4 * MiB, max_lines=50_000, answer_on_stderr=True),
    # The rows below feed only the report's `neighbors` and `versions` (no check): they come
    # last, so on a busy node the checks' tools get the runner's workers first. The
    # first-hop switch keeps its own order of trust, smpquery over a fabric scan over LLDP,
    # in its joiners (netdoctor.inventory.from_neighbors).
    # Each IB port's first-hop switch, asked of that switch by one direct-route SMP (`0,PORT`:
    # out of this port, one hop): it loads no SM and sweeps nothing, so it stays cheap in a
    # prolog on thousands of nodes. NodeInfo gives the switch's GUID and the port we land on
    # (LocalPort), NodeDesc its name. It beats a fabric scan's view of the same cable.
    Source("smpquery-nodeinfo-{dev}-{port}", ("smpquery", "-C", "{dev}", "-P", "{port}", "-D", "nodeinfo", "0,{port}"),
           "netdoctor.parsers.smpquery:parse_smpquery_nodeinfo", _needs("neighbors"), Scope.IB_PORT, timeout_s=3.0,
           root=True, max_output_bytes=64 * KiB, max_lines=1_000),      # ~15 lines
    Source("smpquery-nodedesc-{dev}-{port}", ("smpquery", "-C", "{dev}", "-P", "{port}", "-D", "nodedesc", "0,{port}"),
           "netdoctor.parsers.smpquery:parse_smpquery_nodedesc", _needs("neighbors"), Scope.IB_PORT, timeout_s=3.0,
           root=True, max_output_bytes=64 * KiB, max_lines=1_000),
    # The switch each Ethernet (RoCE) port is cabled to, as lldpd heard it: ~80 lines of
    # indented JSON per interface, 20 interfaces ~2,000 lines.
    Source("lldpctl-json", ("lldpctl", "-f", "json"), "netdoctor.parsers.lldpctl:parse_lldpctl_json",
           _needs("neighbors"), timeout_s=3.0, max_output_bytes=4 * MiB, max_lines=100_000),
    # Versions the report carries for the fleet's drift (CONTRACT 6.3 `versions`): the OFED
    # distribution, and the fabric manager, which must match the GPU driver to the build.
    # One or two lines each.
    Source("ofed_info-s", ("ofed_info", "-s"), "netdoctor.parsers.versions:parse_ofed_info", _needs("versions"),
           timeout_s=3.0, max_output_bytes=64 * KiB, max_lines=1_000),
    Source("nv-fabricmanager-version", ("nv-fabricmanager", "--version"),
           "netdoctor.parsers.versions:parse_fabricmanager_version", _needs("versions"), timeout_s=3.0,
           max_output_bytes=64 * KiB, max_lines=1_000),
    Source("fi_info-version", ("fi_info", "--version"), "netdoctor.parsers.fi_info:parse_fi_info_version",
           _needs("versions"), Scope.EFA, timeout_s=3.0, max_output_bytes=64 * KiB, max_lines=1_000),
)

SOURCES_BY_NAME: dict[str, Source] = {source.name: source for source in SOURCES}
