"""Physical-layer parsers on real outputs: `mlxlink -d DEV -c` (tests/data/corpus/mlxlink-c) and
`ethtool -S NETDEV` (tests/data/corpus/ethtool-S), with PROVENANCE.tsv; then the edge cases the
format allows (link down, the firmware's "nothing counted" BER, tool errors, oversize counters).

The per-file expectations are registered in test_parsers_corpus.py's TEXT_KINDS, so every corpus
file of these kinds is parsed there; the tests below are the ones a corpus file cannot express.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from netdoctor.errors import NothingToParse, ParseError
from netdoctor.parsers.ethtool_stats import parse_ethtool_stats
from netdoctor.parsers.mlxlink_counters import PhyCounters, parse_ber, parse_mlxlink_counters

# --- mlxlink -c: the real samples ---------------------------------------------------------------

BF3_PORT0 = "fchamicapereira-sigcomm26-tutorial-bluefield__mlxlink-p1-m-c_bf3-port0-eth100g.txt"
BF3_PORT1 = "fchamicapereira-sigcomm26-tutorial-bluefield__mlxlink-p1-m-c_bf3-port1-eth100g.txt"
SICHEK_400G = "scitix-sichek__mlxlink_dom_test.go_mlxlink-c-400g-ansi.txt"
CX6DX_NO_C = "unresolved-repo-id40884072527__mlxlink-d-mlx5_1-no-c_cx6dx-eth100g.txt"
CX6_HDR = "unresolved-repo-id60859828466__mlxlink-show-counters-grep_mlx5_0-cx6-ib-hdr.txt"
CX6_TOOL_ERROR = "unresolved-repo-id60859828466__mlxlink-show-ber-monitor-2to1_pciconf0-tool-error.txt"


def _check_bf3(minutes: float) -> Callable[[str], None]:
    """BlueField-3, MFT 4.30.1, 100GbE over a passive DAC: an Ethernet port prints no Symbol lines."""
    def check(text: str) -> None:
        phy = parse_mlxlink_counters(text)
        assert (phy.state, phy.speed, phy.lanes, phy.fec) == ("Active", "100G", 4, "Standard RS-FEC - RS(528,514)")
        assert (phy.status_opcode, phy.recommendation, phy.firmware) == (0, "No issue was observed", "32.43.2402")
        assert phy.since_clear_s == pytest.approx(minutes * 60)
        assert (phy.effective_errors, phy.effective_ber, phy.raw_errors_per_lane, phy.raw_ber) == (0, 0.0, (0, 0, 0, 0), 0.0)
        assert (phy.link_down, phy.link_error_recovery) == (0, 0)
        assert (phy.symbol_errors, phy.symbol_ber, phy.raw_ber_per_lane) == (None, None, None)
    return check


def _check_sichek_400g(text: str) -> None:
    assert "\x1b[32m" in text                          # the BERs really arrive coloured
    phy = parse_mlxlink_counters(text)
    assert phy.since_clear_s == pytest.approx(348349.5 * 60)
    assert phy.raw_errors_per_lane == (3946476397, 5120336064, 7692183445, 3026261414)   # above 2^32
    assert phy.raw_ber == pytest.approx(2e-9, rel=1e-12)
    assert (phy.effective_errors, phy.effective_ber, phy.link_down, phy.link_error_recovery) == (0, 0.0, 0, 0)
    assert (phy.state, phy.fec, phy.lanes) == (None, None, None)       # the counters section only


def _check_cx6_hdr(text: str) -> None:
    """IB HDR on a ConnectX-6: Symbol lines present; the user's grep dropped Time and Link Down."""
    phy = parse_mlxlink_counters(text)
    assert phy.fec == "RS-FEC - (544,514) + PLR"
    assert phy.raw_errors_per_lane == (3183333, 242074)
    assert phy.raw_ber == pytest.approx(1e-8, rel=1e-12)
    assert (phy.symbol_errors, phy.symbol_ber, phy.effective_errors, phy.effective_ber) == (0, 0.0, 0, 0.0)
    assert phy.link_error_recovery == 0
    assert (phy.since_clear_s, phy.link_down, phy.lanes) == (None, None, None)


def _check_no_counters_section(text: str) -> None:
    with pytest.raises(NothingToParse, match="Physical Counters and BER Info"):
        parse_mlxlink_counters(text)


def _check_tool_error(text: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse_mlxlink_counters(text)
    error = caught.value
    assert not isinstance(error, NothingToParse)       # the tool failed: said so, not "nothing here"
    assert "tool error" in error.message and "--show_ber_monitor" in error.message
    assert error.line.startswith("-E- ") and text.splitlines()[error.line_number - 1] == error.line


MLXLINK_C_EXPECTATIONS: dict[str, Callable[[str], None]] = {
    BF3_PORT0: _check_bf3(25074.8),
    BF3_PORT1: _check_bf3(25075.2),
    SICHEK_400G: _check_sichek_400g,
    CX6_HDR: _check_cx6_hdr,
    CX6DX_NO_C: _check_no_counters_section,
    CX6_TOOL_ERROR: _check_tool_error,
}

# --- ethtool -S: the real samples ---------------------------------------------------------------


def _check_ethq_cx4lx(text: str) -> None:
    """Upstream stores it without the `NIC statistics:` header and without the indent."""
    stats = parse_ethtool_stats(text)
    assert len(stats) == len(text.splitlines()) == 751
    assert (stats["rx_packets"], stats["tx_packets"], stats["rx_bytes"]) == (845320277, 896117891, 2195783498134)
    assert (stats["rx_pcs_symbol_err_phy"], stats["rx_corrected_bits_phy"], stats["rx_symbol_err_phy"]) == (0, 0, 0)
    assert (stats["rx_crc_errors_phy"], stats["link_down_events_phy"], stats["rx_out_of_buffer"]) == (0, 0, 0)
    assert (stats["rx_prio0_bytes"], stats["rx_prio0_packets"]) == (2202570777997, 845715962)
    assert (stats["tx_prio0_bytes"], stats["tx_prio0_packets"]) == (2662454044895, 896117891)
    assert {stats[f"rx_prio{prio}_packets"] for prio in range(1, 8)} == {0}
    assert not any(name.startswith(("rx_prio", "tx_prio")) and "pause" in name for name in stats)   # no PFC lines
    assert (stats["rx_global_pause"], stats["tx_global_pause"]) == (0, 0)
    assert stats["tx15_xmit_more"] == 5530                              # the last line


def _check_ofed_100g(text: str) -> None:
    stats = parse_ethtool_stats(text)
    assert len(stats) == len(text.splitlines()) - 1 == 263              # every line but the header
    assert (stats["rx_crc_errors_phy"], stats["rx_symbol_err_phy"], stats["rx_pcs_symbol_err_phy"]) == (386, 386, 386)
    assert stats["rx_corrected_bits_phy"] == 17750739
    assert [stats[f"rx_err_lane_{lane}_phy"] for lane in range(4)] == [28116, 0, 0, 17722623]
    assert (stats["rx_prio0_bytes"], stats["rx_prio0_packets"], stats["rx_prio0_discards"]) == (2027206797, 15005729, 0)
    assert (stats["rx_prio0_buf_discard"], stats["rx_prio0_cong_discard"], stats["rx_prio0_marked"]) == (0, 0, 0)
    assert (stats["tx_pause_storm_warning_events"], stats["tx_pause_storm_error_events"]) == (0, 0)
    assert "rx_bits_phy" not in stats and "NIC statistics" not in stats


def _check_grep_discards(text: str) -> None:
    stats = parse_ethtool_stats(text)
    assert stats["rx_steer_missed_packets"] == 24627
    assert {name: stats[name] for name in stats if name.startswith("rx_prio")} == {
        f"rx_prio{prio}_discards": 0 for prio in range(8)}
    assert len(stats) == 14


def _check_grep_pause_pci(text: str) -> None:
    stats = parse_ethtool_stats(text)
    assert (stats["tx_pause_ctrl_phy"], stats["tx_global_pause"], stats["tx_global_pause_duration"]) == (
        1266552, 1266552, 555665182)
    assert (stats["rx_pause_ctrl_phy"], stats["rx_global_pause"], stats["tx_pci_signal_integrity"]) == (0, 0, 3)
    assert len(stats) == 17


ETHTOOL_S_EXPECTATIONS: dict[str, Callable[[str], None]] = {
    "isc-projects-ethq__tests_mlx5_core_ethtool-S.txt": _check_ethq_cx4lx,
    "unresolved-repo-id31172234831__ethtool-S_mlx5-100g-mlnx-ofed_DERIVED.txt": _check_ofed_100g,
    "unresolved-repo-id60942567937__ethtool-S-grep-disc_cx4lx-25g.txt": _check_grep_discards,
    "unresolved-repo-id60942567937__ethtool-S-grep-pause-pci_cx4lx-25g.txt": _check_grep_pause_pci,
}

# --- mlxlink -c: edge cases -----------------------------------------------------------------------

# The BF3 sample's counters section (35-character label column); values are put in per test.
_SECTION = """\
Physical Counters and BER Info
------------------------------
Time Since Last Clear [Min]        : {time}
Effective Physical Errors          : {errors}
Effective Physical BER             : {ber}
Raw Physical Errors Per Lane       : {lanes}
Link Down Counter                  : {errors}
Link Error Recovery Counter        : {errors}
Raw Physical BER                   : {ber}
"""


def _section(time: str = "25074.8", errors: str = "0", ber: str = "15E-255", lanes: str = "0,0,0,0") -> str:
    return _SECTION.format(time=time, errors=errors, ber=ber, lanes=lanes)


@pytest.mark.parametrize(("text", "value"), [
    ("15E-255", 0.0),            # the firmware's "nothing counted": the smallest value the format holds
    ("0E-255", 0.0),
    ("1E-8", 1e-8),
    ("2E-9", 2e-9),
    ("5E-10", 5e-10),
    ("1.5E-12", 1.5e-12),
    ("15E-254", 1.5e-253),       # only exactly 15E-255 means zero
])
def test_ber_values(text: str, value: float) -> None:
    assert parse_ber(text) == pytest.approx(value, rel=1e-12, abs=0.0)


def test_nothing_counted_ber_is_zero_in_every_ber_field() -> None:
    phy = parse_mlxlink_counters(_section(ber="15E-255"))
    assert (phy.effective_ber, phy.raw_ber) == (0.0, 0.0)
    assert parse_mlxlink_counters(_section(ber="0E-255")).raw_ber == 0.0
    assert parse_mlxlink_counters(_section(ber="1.5E-12")).raw_ber == pytest.approx(1.5e-12, rel=1e-12)


def test_link_down_prints_na_and_gives_none() -> None:
    """mlxlink's setPrintVal prints `N/A` for every counter while the link is down."""
    phy = parse_mlxlink_counters(_section(time="N/A", errors="N/A", ber="N/A", lanes="N/A"))
    assert phy == PhyCounters()


def test_raw_ber_per_lane_line() -> None:
    text = _section() + "Raw Physical BER Per Lane          : 1E-10,1E-9,4E-10,15E-255\n"
    assert parse_mlxlink_counters(text).raw_ber_per_lane == pytest.approx((1e-10, 1e-9, 4e-10, 0.0), rel=1e-12)


@pytest.mark.parametrize(("field", "values", "bad_line"), [
    ("ber", {"ber": "1E-"}, "Effective Physical BER"),
    ("ber", {"ber": "1e-8"}, "Effective Physical BER"),
    ("ber", {"ber": "0.000001"}, "Effective Physical BER"),
    ("ber", {"ber": "1E-" + "9" * 400}, "Effective Physical BER"),     # a magnitude past any float
    ("counter", {"errors": "-1"}, "Effective Physical Errors"),
    ("counter", {"errors": "12a"}, "Effective Physical Errors"),
    ("counter", {"errors": "1.0"}, "Effective Physical Errors"),
    ("lanes", {"lanes": "3183333,,242074"}, "Raw Physical Errors Per Lane"),
    ("lanes", {"lanes": "3183333, 242074"}, "Raw Physical Errors Per Lane"),
    ("time", {"time": "-5.0"}, "Time Since Last Clear [Min]"),
    ("time", {"time": "inf"}, "Time Since Last Clear [Min]"),
])
def test_malformed_value_is_a_parse_error_naming_the_line(field: str, values: dict[str, str], bad_line: str) -> None:
    text = _section(**values)
    with pytest.raises(ParseError) as caught:
        parse_mlxlink_counters(text)
    error = caught.value
    assert not isinstance(error, NothingToParse), field
    assert error.line.startswith(bad_line)
    assert text.splitlines()[error.line_number - 1] == error.line
    assert f"line {error.line_number}" in str(error)


def test_a_width_in_another_form_is_unknown_not_the_whole_reading_lost() -> None:
    # No rule reads mlxlink's width (sysfs gives the port's): an odd one costs that field only.
    for width, lanes in (("four", None), ("4X", 4), ("2x", 2)):
        text = f"Operational Info\n----------------\nWidth                           : {width}\n" + _section()
        assert parse_mlxlink_counters(text).lanes == lanes


def test_tool_error_without_output() -> None:
    with pytest.raises(ParseError, match="tool error") as caught:
        parse_mlxlink_counters('\n-E- "--show_ber_monitor" option is not supported for HCA\n')
    assert not isinstance(caught.value, NothingToParse) and caught.value.line_number == 2


@pytest.mark.parametrize("text", ["", "   \n\n", "Operational Info\n----------------\nState : Active\n"])
def test_no_counters_is_nothing_to_parse(text: str) -> None:
    with pytest.raises(NothingToParse):
        parse_mlxlink_counters(text)


def test_first_reading_of_a_label_stands() -> None:
    text = _section(lanes="1,2,3,4") + "Raw Physical Errors Per Lane       : 9,9,9,9\n"
    assert parse_mlxlink_counters(text).raw_errors_per_lane == (1, 2, 3, 4)


def test_crlf_and_32_column_labels() -> None:
    """MFT 4.22-4.24 pad labels to 32 columns (the CX-6 HDR sample); a Windows paste ends lines in CRLF."""
    text = ("Physical Counters and BER Info\r\n------------------------------\r\n"
            "Raw Physical Errors Per Lane    : 3183333,242074\r\nRaw Physical BER                : 1E-8\r\n")
    phy = parse_mlxlink_counters(text)
    assert (phy.raw_errors_per_lane, phy.raw_ber) == ((3183333, 242074), pytest.approx(1e-8, rel=1e-12))

# --- ethtool -S: edge cases -----------------------------------------------------------------------


def test_header_and_indent_are_optional() -> None:
    with_header = "NIC statistics:\n     rx_packets: 1226\n     rx_corrected_bits_phy: 17750739\n"
    bare = "rx_packets: 1226\nrx_corrected_bits_phy: 17750739\n"
    assert parse_ethtool_stats(with_header) == parse_ethtool_stats(bare) == {
        "rx_packets": 1226, "rx_corrected_bits_phy": 17750739}


def test_queue_prefixed_names_keep_everything_before_the_last_colon() -> None:
    """bnxt_en prints per-ring counters as `[N]: name: value`."""
    text = "NIC statistics:\n     [0]: rx_ucast_packets: 1\n     [1]: rx_ucast_packets: 22\n     rx_total_discard_pkts: 0\n"
    assert parse_ethtool_stats(text) == {
        "[0]: rx_ucast_packets": 1, "[1]: rx_ucast_packets": 22, "rx_total_discard_pkts": 0}


def test_a_pasted_prompt_and_blank_lines_are_not_counters() -> None:
    text = "root@node1:~# ethtool -S ens1f0np0\nNIC statistics:\n\n     rx_prio3_pause: 12\n"
    assert parse_ethtool_stats(text) == {"rx_prio3_pause": 12}


def test_u64_bounds() -> None:
    top = (1 << 64) - 1
    assert parse_ethtool_stats(f"NIC statistics:\n     rx_bytes_phy: {top}\n") == {"rx_bytes_phy": top}
    for value in (str(top + 1), "9" * 30, "9" * 5000):     # 5,000 digits: past Python's int-from-text limit
        text = f"NIC statistics:\n     rx_bytes_phy: {value}\n"
        with pytest.raises(ParseError) as caught:
            parse_ethtool_stats(text)
        assert caught.value.line_number == 2 and not isinstance(caught.value, NothingToParse)


@pytest.mark.parametrize("value", ["-1", "1.5", "12x", "0x10", "N/A", ""])
def test_non_integer_value_is_a_parse_error_naming_the_line(value: str) -> None:
    text = f"NIC statistics:\n     rx_packets: 5\n     rx_crc_errors_phy: {value}\n"
    with pytest.raises(ParseError) as caught:
        parse_ethtool_stats(text)
    assert caught.value.line_number == 3 and caught.value.line.strip().startswith("rx_crc_errors_phy:")


@pytest.mark.parametrize("text", ["", "\n  \n", "NIC statistics:\n"])
def test_no_counters_is_nothing_to_parse_for_ethtool(text: str) -> None:
    with pytest.raises(NothingToParse):
        parse_ethtool_stats(text)


def test_ethtool_tool_error_is_named() -> None:
    with pytest.raises(ParseError, match="tool error") as caught:
        parse_ethtool_stats("Cannot get stats strings information: Operation not supported\n")
    assert not isinstance(caught.value, NothingToParse)
