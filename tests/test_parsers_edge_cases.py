"""Edge cases of each parser, on small hand-made inputs shaped like the real outputs."""

from __future__ import annotations


import pytest

from netdoctor.errors import NothingToParse, ParseError
from netdoctor.inventory.model import LinkLayer, LinkRate, PhysState, PortState
from netdoctor.parsers import (
    parse_ibdev2netdev,
    parse_iblinkinfo,
    parse_ibstat,
    parse_ibstat_output,
    parse_ibv_devinfo,
    parse_mlnx_qos,
    parse_mlnx_qos_all,
    parse_nvidia_smi_topo,
    parse_nvidia_smi_topo_matrix,
    parse_perfquery,
)
from netdoctor.parsers.common import is_paste_noise, normalize_guid, screen_tool_errors
from netdoctor.parsers.sysfs_values import (
    IB_SPEED_LANE_GBPS,
    parse_counter,
    parse_hex_or_int,
    parse_int,
    parse_link_width,
    parse_numa_node,
    parse_pcie_speed,
    parse_phys_state,
    parse_port_state,
    parse_rate,
    pcie_generation,
    rate_from_lanes,
)

# --- sysfs values -----------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "state"), [
    ("4: ACTIVE\n", PortState.ACTIVE), ("2: INIT", PortState.INIT), ("1: DOWN", PortState.DOWN),
    ("3: ARMED", PortState.ARMED), ("5: ACTIVE_DEFER", PortState.ACTIVE_DEFER),
])
def test_port_state_values(text: str, state: PortState) -> None:
    assert parse_port_state(text) is state


@pytest.mark.parametrize("text", ["ACTIVE", "4: LinkUp", "3: ACTIVE", "", "4:"])
def test_port_state_rejects(text: str) -> None:
    with pytest.raises(ParseError):
        parse_port_state(text)


@pytest.mark.parametrize(("text", "state"), [
    ("5: LinkUp\n", PhysState.LINK_UP), ("2: Polling", PhysState.POLLING), ("3: Disabled", PhysState.DISABLED),
    ("1: Sleep", PhysState.SLEEP), ("4: PortConfigurationTraining", PhysState.TRAINING),
    ("6: LinkErrorRecovery", PhysState.LINK_ERROR_RECOVERY), ("7: Phy Test", PhysState.PHY_TEST),
])
def test_phys_state_values(text: str, state: PhysState) -> None:
    assert parse_phys_state(text) is state


def test_phys_state_refuses_a_logical_state() -> None:
    with pytest.raises(ParseError, match="physical port state"):
        parse_phys_state("4: ACTIVE")


@pytest.mark.parametrize(("text", "rate"), [
    ("400 Gb/sec (4X NDR)\n", LinkRate(400.0, 4, "NDR", 106.25)),
    ("200 Gb/sec (2X NDR)", LinkRate(200.0, 2, "NDR", 106.25)),
    ("25 Gb/sec (1X EDR)", LinkRate(25.0, 1, "EDR", 25.78125)),
    ("10 Gb/sec (4X)", LinkRate(10.0, 4, None, None)),
    ("56 Gb/sec (4X FDR)", LinkRate(56.0, 4, "FDR", 14.0625)),
    ("2.5 Gb/sec (1X SDR)", LinkRate(2.5, 1, "SDR", 2.5)),
    ("40 Gb/sec (4X FDR10)", LinkRate(40.0, 4, "FDR10", 10.0)),
])
def test_rate_values(text: str, rate: LinkRate) -> None:
    assert parse_rate(text) == rate


@pytest.mark.parametrize("text", ["400", "400 Gb/sec", "400 Gb/sec (4X ZDR)", "Gb/sec (4X NDR)"])
def test_rate_rejects(text: str) -> None:
    with pytest.raises(ParseError):
        parse_rate(text)


def test_counter_values() -> None:
    assert parse_counter("255") == 255
    assert parse_counter("18446744073709551615\n") == 2**64 - 1
    assert parse_counter("N/A (no PMA)\n") is None
    for bad in ("-1", "0x10", "twelve", ""):
        with pytest.raises(ParseError):
            parse_counter(bad)


def test_integer_values() -> None:
    assert parse_numa_node("-1\n") is None and parse_numa_node("3") == 3
    assert parse_int("2044\n") == 2044
    assert parse_hex_or_int("0x1a") == 26 and parse_hex_or_int("65535") == 65535
    with pytest.raises(ParseError):
        parse_hex_or_int("lid")     # gcm fixtures anonymise lids to the word itself


@pytest.mark.parametrize(("text", "gts", "generation"), [
    ("32.0 GT/s PCIe\n", 32.0, 5), ("16 GT/s", 16.0, 4), ("8.0 GT/s PCIe", 8.0, 3),
    ("2.5 GT/s PCIe", 2.5, 1), ("5.0 GT/s", 5.0, 2), ("64.0 GT/s PCIe", 64.0, 6),
])
def test_pcie_speed(text: str, gts: float, generation: int) -> None:
    assert parse_pcie_speed(text) == gts
    assert pcie_generation(gts) == generation


def test_pcie_unknowns() -> None:
    assert parse_pcie_speed("Unknown\n") is None
    assert pcie_generation(12.0) is None
    assert parse_link_width("16\n") == 16 and parse_link_width("x8") == 8 and parse_link_width("0") is None
    with pytest.raises(ParseError):
        parse_pcie_speed("fast")


def test_rate_from_lanes() -> None:
    assert rate_from_lanes(4, 106.25) == LinkRate(400.0, 4, "NDR", 106.25)
    assert rate_from_lanes(4, 50.0) == LinkRate(200.0, 4, "HDR", 53.125)      # ibv_devinfo nominal lane
    assert rate_from_lanes(4, 14.0625) == LinkRate(56.0, 4, "FDR", 14.0625)
    assert rate_from_lanes(4, 10.0, "FDR10") == LinkRate(40.0, 4, "FDR10", 10.0)
    assert rate_from_lanes(2, 7.5) == LinkRate(15.0, 2, None, 7.5)
    assert IB_SPEED_LANE_GBPS["XDR"] == 212.5


# --- common ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "meaning"), [
    ("ibpanic: [1234] main: 'ib1' IB device can't be found: No such file or directory", "aborted"),
    ("ibwarn: [1] mad_rpc_open_port: can't open UMAD port ((null):0)", "UMAD"),
    ("Failed to initialize NVML: Driver/library version mismatch", "NVML"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure ...", "driver"),
    ("bash: ibstat: command not found", "not installed"),
    ("No IB devices found", "no RDMA devices"),
])
def test_tool_errors_are_named(text: str, meaning: str) -> None:
    with pytest.raises(ParseError, match=meaning) as caught:
        screen_tool_errors("tool", "\n" + text + "\n")
    assert caught.value.line_number == 2


def test_guid_spellings_agree() -> None:
    assert normalize_guid("t", "0xEC0D9A03003D677A") == "0xec0d9a03003d677a"
    assert normalize_guid("t", "ec0d:9a03:003d:677a") == "0xec0d9a03003d677a"
    assert normalize_guid("t", "...") is None
    with pytest.raises(ParseError):
        normalize_guid("t", "0xZZ")


def test_paste_noise() -> None:
    for line in ("$ ibstat", "[root@node1 ~]# ibstat", "root@pod:/# rdma link", "    .....", "[...]", "+ mlnx_qos -i eth4", ""):
        assert is_paste_noise(line), line
    for line in ("# Port counters: Lid 1 port 1", "CA 'mlx5_0'", "GPU0\t X "):
        assert not is_paste_noise(line), line


# --- ibstat -----------------------------------------------------------------------------

IBSTAT_TABS = (
    "CA 'mlx5_0'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tFirmware version: 28.39.1002\n"
    "\tHardware version: 0\n\tNode GUID: 0x946dae0300cde72c\n\tSystem image GUID: 0x946dae0300cde72c\n"
    "\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 400\n\t\tBase lid: 75\n"
    "\t\tLMC: 0\n\t\tSM lid: 334\n\t\tCapability mask: 0xa751e848\n\t\tPort GUID: 0x946dae0300cde72c\n"
    "\t\tLink layer: InfiniBand\n"
)


def test_ibstat_tabs_spaces_and_collapsed_indent_agree() -> None:
    spaces = IBSTAT_TABS.replace("\t", "        ")
    collapsed = IBSTAT_TABS.replace("\t", " ")
    assert parse_ibstat(IBSTAT_TABS) == parse_ibstat(spaces) == parse_ibstat(collapsed)
    (ca,) = parse_ibstat(IBSTAT_TABS)
    assert ca.ports[0].sm_lid == 334 and ca.ports[0].link_layer is LinkLayer.INFINIBAND


def test_ibstat_blank_lines_between_records_and_prompt() -> None:
    text = "$ ibstat\n" + IBSTAT_TABS.replace("\tPort 1:", "\n\tPort 1:") + "\n" + IBSTAT_TABS.replace("mlx5_0", "mlx5_1")
    cas = parse_ibstat(text)
    assert [ca.name for ca in cas] == ["mlx5_0", "mlx5_1"] and all(len(ca.ports) == 1 for ca in cas)


def test_ibstat_single_port_form() -> None:
    text = "CA: 'mlx4_0'\nPort 2:\nState: Down\nPhysical state: Polling\nRate: 10\nBase lid: 0\nLink layer: InfiniBand\n"
    (ca,) = parse_ibstat(text)
    assert (ca.name, ca.ports[0].number, ca.ports[0].state, ca.ports[0].phys_state) == (
        "mlx4_0", 2, PortState.DOWN, PhysState.POLLING)


def test_ibstat_short_form_has_no_ports() -> None:
    text = IBSTAT_TABS.split("\tPort 1:")[0]
    (ca,) = parse_ibstat(text)
    assert ca.ports == () and ca.number_of_ports == 1 and ca.firmware == "28.39.1002"


def test_ibstat_ibpanic_trailer_keeps_records() -> None:
    text = IBSTAT_TABS + "ibpanic: [1400444] main: stat of IB device 'mlx5_8' failed: No such file or directory\n"
    output = parse_ibstat_output(text)
    assert [ca.name for ca in output.cas] == ["mlx5_0"]
    assert output.errors == ("ibpanic: [1400444] main: stat of IB device 'mlx5_8' failed: No such file or directory",)


def test_ibstat_ibpanic_alone_is_a_tool_error() -> None:
    with pytest.raises(ParseError, match="tool error: ibpanic"):
        parse_ibstat("ibpanic: [99] main: 'ib1' IB device can't be found: No such file or directory\n")


def test_ibstat_junk_inside_a_record_names_the_line() -> None:
    text = IBSTAT_TABS.replace("\t\tLMC: 0\n", "\t\tLMC: 0\ngarbage here\n")
    with pytest.raises(ParseError) as caught:
        parse_ibstat(text)
    assert caught.value.line_number == 14 and caught.value.line == "garbage here"


def test_ibstat_bad_values() -> None:
    with pytest.raises(ParseError, match="logical port state"):
        parse_ibstat(IBSTAT_TABS.replace("State: Active", "State: Happy"))
    with pytest.raises(ParseError, match="Rate"):
        parse_ibstat(IBSTAT_TABS.replace("Rate: 400", "Rate: fast"))


def test_ibstat_empty_and_noise_only() -> None:
    with pytest.raises(NothingToParse):
        parse_ibstat("")
    with pytest.raises(NothingToParse):
        parse_ibstat("\n  \n$ ibstat\n")
    with pytest.raises(ParseError, match="not recognised"):
        parse_ibstat("hello world\n")


# --- ibv_devinfo -----------------------------------------------------------------------------

def test_ibv_devinfo_spaces_and_mtu_mismatch() -> None:
    text = ("hca_id: mlx5_0\n    transport: InfiniBand (0)\n    fw_ver: 28.39.1002\n    node_guid: a088:c203:00e3:142a\n"
            "    vendor_part_id: 4129\n    phys_port_cnt: 1\n        port: 1\n            state: PORT_ACTIVE (4)\n"
            "            max_mtu: 4096 (5)\n            active_mtu: 4096 (5)\n            link_layer: InfiniBand\n"
            "            active_width: 4X (2)\n            active_speed: 100.0 Gbps (128)\n            phys_state: LINK_UP (5)\n")
    (device,) = parse_ibv_devinfo(text)
    assert device.node_guid == "0xa088c20300e3142a"
    assert device.ports[0].rate == LinkRate(400.0, 4, "NDR", 106.25)
    with pytest.raises(ParseError, match="MTU"):
        parse_ibv_devinfo(text.replace("active_mtu: 4096 (5)", "active_mtu: 4096 (3)"))
    with pytest.raises(ParseError, match="hca_id"):
        parse_ibv_devinfo("\ttransport:\t\t\tInfiniBand (0)\n")


# --- ibdev2netdev ----------------------------------------------------------------------------

def test_ibdev2netdev_column_t_and_comments() -> None:
    text = "mlx5_0  port  1  ==>  ibp26s0  (Down)   # CX-7 1/8 infiniband\nmlx5_6 port 1 ==> ib1 (Up)\nmlx5_7 port 1 ==> ib1 (Up)\n"
    mappings = parse_ibdev2netdev(text)
    assert [(m.hca, m.netdev, m.netdev_up) for m in mappings] == [
        ("mlx5_0", "ibp26s0", False), ("mlx5_6", "ib1", True), ("mlx5_7", "ib1", True)]


def test_ibdev2netdev_rdma_link_without_netdev_and_junk() -> None:
    text = "link mlx5_0/1 subnet_prefix fe80:0000:0000:0000 lid 5 sm_lid 1 lmc 0 state ACTIVE physical_state LINK_UP\n"
    (mapping,) = parse_ibdev2netdev(text)
    assert (mapping.hca, mapping.netdev, mapping.port_state) == ("mlx5_0", None, "ACTIVE")
    with pytest.raises(ParseError) as caught:
        parse_ibdev2netdev(text + "mlx5_1 port one ==> ib1\n")
    assert caught.value.line_number == 2


# --- iblinkinfo -------------------------------------------------------------------------------

SWITCH_PORT = '{lid:>12} {port:>4}[  ] ==( 4X      53.125 Gbps Active/  LinkUp)==>  {peer:>6} {peer_port:>4}[  ] "leaf-{peer}" ( )\n'
DOWN_PORT = '{lid:>12} {port:>4}[  ] ==(                Down/ Polling)==>             [  ] "" ( )\n'


def test_iblinkinfo_could_be_hint_and_fdr10() -> None:
    text = ("Switch: 0x0002c90200000001 leaf-1:\n"
            '           4    1[  ] ==( 1X      53.125 Gbps Active/  LinkUp)==>       5    1[  ] "leaf-2" ( Could be 4X )\n'
            '           4    2[  ] ==( 4X      10.0 Gbps (FDR10) Active/ LinkUp)==>       6    1[  ] "leaf-3" ( Could be 4X Could be 14.0625 Gbps )\n')
    first, second = parse_iblinkinfo(text)
    assert (first.width, first.speed, first.could_be_width, first.could_be_lane_gbps) == (1, "HDR", 4, None)
    assert (second.speed, second.lane_gbps, second.could_be_lane_gbps) == ("FDR10", 10.0, 14.0625)


def test_iblinkinfo_port_line_without_header() -> None:
    with pytest.raises(ParseError, match="header"):
        parse_iblinkinfo(DOWN_PORT.format(lid=2, port=1))


def test_iblinkinfo_large_fabric_parses_whole() -> None:
    """2,000 switches x 40 ports (~82k lines) parse completely; the speed is shown in
    benchmarks/iblinkinfo_bench.py, not timed here (a loaded machine would make it flaky)."""
    parts: list[str] = []
    for switch in range(2000):
        lid = switch + 1
        parts.append(f"Switch: 0x{0x7cfe900300000000 + switch:016x} MF0;switch-{switch}:MQM8700/U1:\n")
        for port in range(1, 41):
            if port % 10 == 0:
                parts.append(DOWN_PORT.format(lid=lid, port=port))
            else:
                parts.append(SWITCH_PORT.format(lid=lid, port=port, peer=4000 + port, peer_port=port))
    text = "".join(parts)
    assert text.count("\n") == 82000
    links = parse_iblinkinfo(text)
    assert len(links) == 80000
    assert sum(link.state is PortState.DOWN for link in links) == 8000
    assert links[-2].peer_description == "leaf-4039" and links[-2].lane_gbps == 53.125


# --- perfquery ----------------------------------------------------------------

def test_perfquery_basic_block_and_errors() -> None:
    text = ("# Port counters: Lid 5 port 1 (CapMask: 0x1600)\nPortSelect:......................1\n"
            "CounterSelect:...................0x0000\nSymbolErrorCounter:..............65535\n"
            "LinkErrorRecoveryCounter:........255\nLinkDownedCounter:...............3\n")
    (block,) = parse_perfquery(text)
    assert (block.kind, block.lid, block.cap_mask) == ("basic", 5, 0x1600)
    assert block.counters == {"SymbolErrorCounter": 65535, "LinkErrorRecoveryCounter": 255, "LinkDownedCounter": 3}
    with pytest.raises(ParseError, match="header"):
        parse_perfquery("SymbolErrorCounter:..............0\n")
    with pytest.raises(ParseError, match="decimal"):
        parse_perfquery(text.replace("65535", "lots"))
    with pytest.raises(ParseError, match="UMAD"):
        parse_perfquery("ibwarn: [3] mad_rpc_open_port: can't open UMAD port ((null):0)\n"
                        "perfquery: iberror: failed: Failed to open '(null)' port '0'\n")


# --- mlnx_qos ------------------------------------------------------------------------

QOS = ("DCBX mode: OS controlled\nPriority trust state: pcp\nCable len: 7\nPFC configuration:\n"
       "\tpriority    0   1   2   3   4   5   6   7\n\tenabled     {enabled}\n"
       "tc: 0 ratelimit: unlimited, tsa: ets, bw: 40%\n\t priority:  0\n\t priority:  1\n"
       "tc: 3 ratelimit: unlimited, tsa: strict\n\t priority:  3\n")


def test_mlnx_qos_last_output_wins() -> None:
    before = QOS.format(enabled="0   0   0   0   0   0   0   0")
    after = QOS.format(enabled="0   0   0   1   0   0   0   0")
    text = "+ mlnx_qos -i eth4 --trust pcp\n" + before + "+ mlnx_qos -i eth4 --pfc 0,0,0,1,0,0,0,0\n" + after
    assert [qos.pfc_enabled for qos in parse_mlnx_qos_all(text)] == [(), (3,)]
    qos = parse_mlnx_qos(text)
    assert (qos.trust, qos.pfc_enabled) == ("pcp", (3,))
    assert [(tc.tc, tc.tsa, tc.bandwidth_percent, tc.priorities) for tc in qos.traffic_classes] == [
        (0, "ets", 40, (0, 1)), (3, "strict", None, (3,))]


def test_mlnx_qos_bad_table_and_no_output() -> None:
    with pytest.raises(ParseError, match="enabled"):
        parse_mlnx_qos(QOS.format(enabled="0 0 0 1"))
    with pytest.raises(ParseError, match="no mlnx_qos output"):
        parse_mlnx_qos("net.ipv4.tcp_ecn = 1\n")
    with pytest.raises(NothingToParse):
        parse_mlnx_qos("+ true\n\n")


# --- nvidia-smi topo ---------------------------------------------------------------------------

TOPO_RAW = (
    "\t\x1b[4mGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV18\tPIX\tNODE\t0-47,96-143\t0\t\t2\n"
    "GPU1\tNV18\t X \tNODE\tPIX\t0-47,96-143\t0\t\tN/A\n"
    "NIC0\tPIX\tNODE\t X \tNODE\t\t\t\t\n"
    "NIC1\tNODE\tPIX\tNODE\t X \t\t\t\t\n"
    "\nLegend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n\n"
    "NIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_bond_0\n"
)


def test_topo_raw_tabs_ansi_and_gpu_numa_id() -> None:
    matrix = parse_nvidia_smi_topo_matrix(TOPO_RAW)
    topo = matrix.topology
    assert (topo.gpus, topo.nics) == (("GPU0", "GPU1"), ("NIC0", "NIC1"))
    assert topo.nic_names == {"NIC0": "mlx5_0", "NIC1": "mlx5_bond_0"}
    assert topo.link("GPU1", "NIC1") == "PIX" and topo.link("NIC0", "NIC1") == "NODE" and len(topo.links) == 16
    assert matrix.gpu_numa_id == {"GPU0": 2, "GPU1": None}
    assert topo.numa_affinity == {"GPU0": 0, "GPU1": 0}


def test_topo_glued_cells_and_prompt_and_no_legend() -> None:
    glued = (
        "$ nvidia-smi topo -m\n"
        "        GPU0    GPU1    NIC0    NIC1    CPU Affinity    NUMA Affinity\n"
        "GPU0     X      NV18    PIXNODE         0-47            0\n"
        "GPU1    NV18     X PIX  NODE            0-47            0\n"
        "NIC0    PIXPIX   X      NODE\n"
        "NIC1    NODENODE NODE     X\n"
    )
    topo = parse_nvidia_smi_topo(glued)
    assert topo.link("GPU0", "NIC0") == "PIX" and topo.link("GPU0", "NIC1") == "NODE"
    assert topo.link("GPU1", "NIC0") == "PIX" and topo.link("NIC0", "GPU1") == "PIX"
    assert topo.nic_names == {} and topo.cpu_affinity == {"GPU0": "0-47", "GPU1": "0-47"}


def test_topo_sixteen_gpus_and_old_nic_labels() -> None:
    labels = [f"GPU{index}" for index in range(16)] + ["mlx5_0"]
    lines = ["\t" + "\t".join(labels) + "\tCPU Affinity\tNUMA Affinity"]
    for row in labels:
        cells = [" X " if row == column else ("SYS" if "mlx" in row + column else "NV12") for column in labels]
        affinity = "\t0-63\t0" if row.startswith("GPU") else ""
        lines.append(row + "\t" + "\t".join(cells) + affinity)
    topo = parse_nvidia_smi_topo("\n".join(lines) + "\n")
    assert len(topo.gpus) == 16 and topo.nics == ("mlx5_0",) and topo.nic_names == {"mlx5_0": "mlx5_0"}
    assert topo.link("GPU15", "mlx5_0") == "SYS" and topo.link("GPU3", "GPU12") == "NV12"


def test_topo_refusals() -> None:
    truncated = TOPO_RAW.split("NIC1\tNODE")[0]
    with pytest.raises(ParseError, match="no row for NIC1"):
        parse_nvidia_smi_topo(truncated)
    with pytest.raises(ParseError, match="diagonal"):
        parse_nvidia_smi_topo(TOPO_RAW.replace("GPU0\t X \tNV18", "GPU0\tNV18\tNV18"))
    with pytest.raises(ParseError, match="not a matrix cell"):
        parse_nvidia_smi_topo(TOPO_RAW.replace("GPU0\t X \tNV18\tPIX", "GPU0\t X \tNV18\tPCI"))
    with pytest.raises(ParseError, match="-p2p"):
        parse_nvidia_smi_topo("\tGPU0\tGPU1\n GPU0\tX\tOK\n GPU1\tOK\tX\n")
    with pytest.raises(ParseError, match="driver"):
        parse_nvidia_smi_topo("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
    with pytest.raises(NothingToParse):
        parse_nvidia_smi_topo("\n\n")


def test_iblinkinfo_malformed_link_field_is_named() -> None:
    text = 'Switch: 0x0002c90200000001 leaf-1:\n           4    1[  ] ==( 4X 25 Gbps)==>       5    1[  ] "leaf-2" ( )\n'
    with pytest.raises(ParseError, match="link field") as caught:
        parse_iblinkinfo(text)
    assert caught.value.line_number == 2


def test_iblinkinfo_fast_path_keeps_line_handling() -> None:
    """parse_iblinkinfo splits lines itself (ANSI only where present) and caches decoded link
    fields: an unknown state still fails on its own line."""
    text = ("\x1b[1mSwitch: 0x0002C90200000001 leaf-1:\x1b[0m\r\n"
            '           4    1[  ] ==( 4X      53.125 Gbps Active/  LinkUp)==>       5    1[  ] "leaf-2" ( )\r\n'
            '           4    2[  ] ==( 4X      53.125 Gbps Active/  LinkUp)==>       6    1[  ] "leaf-3" ( )\r\n')
    first, second = parse_iblinkinfo(text)
    assert (first.node_guid, first.node_description, second.port, second.state) == (
        "0x0002c90200000001", "leaf-1", 2, PortState.ACTIVE)
    assert first.lane_gbps == second.lane_gbps == 53.125
    with pytest.raises(ParseError, match="unknown logical port state") as caught:
        parse_iblinkinfo(text + '           4    3[  ] ==( 4X      53.125 Gbps Bogus/  LinkUp)==>       7    1[  ] "x" ( )\n')
    assert caught.value.line_number == 4


@pytest.mark.parametrize(("stamp", "expected"), [
    ("Mon 2026-11-23 10:01:02 UTC", "2026-11-23T10:01:02+00:00"),
    ("Mon 2026-11-23 10:01:02 +0000", "2026-11-23T10:01:02+00:00"),
    ("Mon 2026-11-23 10:01:02 +0530", "2026-11-23T04:31:02+00:00"),
    ("Mon 2026-11-23 10:01:02 -03:00", "2026-11-23T13:01:02+00:00"),
    ("Mon 2026-11-23 10:01:02 +053000", "2026-11-23T04:31:02+00:00"),
    ("Mon 2026-1-3 1:02:03 UTC", "2026-01-03T01:02:03+00:00"),
    ("Mon 2026-11-23 10:01:02 CET", None),          # a zone name: no zone database read
    ("Mon 2026-11-23 10:01:02 -03", None),
    ("Mon 2026-11-23 10:01:02 +05:99", None),
    ("Mon 2026-11-23 10:01:02 +24:00", None),
    ("Mon 2026-13-23 10:01:02 UTC", None),
    ("Mon 2026-11-23 10:01:60 UTC", None),
    ("Mon ２０２６-11-23 10:01:02 UTC", None),          # not ASCII digits
    ("n/a", None),
])
def test_systemctl_timestamps_as_strptime_read_them(stamp: str, expected: str | None) -> None:
    """systemctl's ActiveEnterTimestamp is read by a pattern, not strptime (~3 ms of imports in
    every run), taking what strptime's "%Y-%m-%d %H:%M:%S %z" took in ASCII digits."""
    from netdoctor.parsers.systemctl import parse_systemctl_show

    state = parse_systemctl_show(f"ActiveState=active\nSubState=running\nActiveEnterTimestamp={stamp}\n")
    assert (state.active_since.isoformat() if state.active_since else None) == expected
