"""`fleet probe`'s verdicts said as they are (issue 24): a group on TCP sockets never leaves its
nodes at `pass`; `expected_gbps` is null where no pack value or rail rate sets one (the key
stays, CONTRACT 6.3), and text and HTML say "no expectation" instead of a number; SHARP is said
"not used" only on a fabric that could use it. The real two-rank NCCL logs of an H100 VM
(tests/data/device/nvidia-h100-x1/fleet-probe: NET/Socket, no net plugin) are judged here too."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from netdoctor.fleet.model import NodeGrade, NodeSummary
from netdoctor.fleet.probe_plan import Group, Measurement, NodeFabric, Thresholds, node_grades
from netdoctor.fleet.probe_render import probe_html, probe_text_lines
from netdoctor.fleet.probe_run import _group_measurement, pair_rows
from netdoctor.fleet.probe_traffic import _facts

DEVICE = Path(__file__).resolve().parent / "data" / "device" / "nvidia-h100-x1" / "fleet-probe"
RAILS = tuple((f"mlx5_{index}:1", 400.0) for index in (0, 3, 4, 5, 6, 9, 10, 11))
FABRIC = NodeFabric(8, RAILS)            # 8 x 400 Gb/s / 8 x 0.9 = 360 GB/s expected
SOCKETS = "NCCL ran over TCP sockets (NET/Socket), not the GPU fabric"


def grades(hosts: str, measurements: list[Measurement], fabrics: dict[str, NodeFabric]) -> dict[str, tuple[str, str]]:
    return node_grades(list(hosts), measurements, [], fabrics, Thresholds())


# ---- NET/Socket: the pair warns, and so do its nodes -----------------------------------------

def test_a_pair_on_sockets_makes_both_its_nodes_warn_not_pass() -> None:
    fabrics = {host: FABRIC for host in "abcd"}
    measurements = [Measurement(("a", "b"), 1, 350.0, transport="NET/Socket", why=SOCKETS),
                    Measurement(("c", "d"), 1, 350.0, transport="NET/IB/GDRDMA"),
                    Measurement(("b", "c"), 2, 350.0, transport="NET/IB/GDRDMA"),
                    Measurement(("d", "a"), 2, 350.0, transport="NET/IB/GDRDMA")]
    rows = pair_rows(measurements, fabrics, Thresholds(), sharp_expected=False)
    assert [row["status"] for row in rows] == ["warn", "pass", "pass", "pass"]
    verdicts = grades("abcd", measurements, fabrics)
    assert {host: grade for host, (grade, _) in verdicts.items()} == {"a": "warn", "b": "warn", "c": "pass", "d": "pass"}
    assert verdicts["a"][1] == ("97% of the expected bus bandwidth with b; "
                                "NCCL ran over TCP sockets (NET/Socket) with b, not the GPU fabric")
    assert "with a, not the GPU fabric" in verdicts["b"][1]


def test_sockets_never_make_a_worse_grade_better() -> None:
    fabrics = {host: FABRIC for host in "ab"}
    slow = [Measurement(("a", "b"), 1, 100.0, transport="NET/Socket", why=SOCKETS)]
    verdicts = grades("ab", slow, fabrics)
    assert {grade for grade, _ in verdicts.values()} == {"warn"}       # 28 %, one partner: warn already
    assert all("TCP sockets" in why for _, why in verdicts.values())
    failed = [Measurement(("a", "b"), 1, None, transport="NET/Socket", status="error", why="worker crashed")]
    assert {grade for grade, _ in grades("ab", failed, fabrics).values()} == {"unknown"}


# ---- expected_gbps: null where nothing sets it ---------------------------------------------

def test_expected_is_null_without_a_rate_and_the_round_median_is_said_as_such() -> None:
    fabrics = {host: NodeFabric(8) for host in "abcdef"}       # no rail reports a rate; the pack sets none
    measurements = [Measurement(("a", "b"), 1, 300.0), Measurement(("c", "d"), 1, 310.0),
                    Measurement(("e", "f"), 1, 120.0)]
    rows = pair_rows(measurements, fabrics, Thresholds(), sharp_expected=False)
    assert all("expected_gbps" in row and row["expected_gbps"] is None for row in rows)
    assert {row["round_median_gbps"] for row in rows} == {300.0}
    assert [row["status"] for row in rows] == ["pass", "pass", "fail"]
    why = grades("abcdef", measurements, fabrics)["e"][1]
    assert why.startswith("40% of the round's median bus bandwidth (no expectation set) with f")
    # With rates the expectation is the fleet's, and no median is said.
    rows = pair_rows(measurements, {host: FABRIC for host in "abcdef"}, Thresholds(), sharp_expected=False)
    assert {row["expected_gbps"] for row in rows} == {360.0} and not any("round_median_gbps" in row for row in rows)
    rows = pair_rows(measurements, fabrics, Thresholds(expected_busbw_gbps=320.0), sharp_expected=False)
    assert {row["expected_gbps"] for row in rows} == {320.0}


def test_a_group_alone_in_its_round_without_an_expectation_is_judged_against_nothing() -> None:
    """The median of one group is that group: it used to pass at "100% of the expected"."""
    fabrics = {"a": NodeFabric(8), "b": NodeFabric(8)}
    measurements = [Measurement(("a", "b"), 1, 1.859, transport="NET/IB/GDRDMA")]
    [row] = pair_rows(measurements, fabrics, Thresholds(), sharp_expected=False)
    assert row["expected_gbps"] is None and row["busbw_gbps"] == 1.859 and "round_median_gbps" not in row
    assert row["status"] == "unknown" and row["why"].startswith("no expectation (no rail rate")
    verdicts = grades("ab", measurements, fabrics)
    assert verdicts["a"] == ("unknown", ("1.859 GB/s with b, judged against nothing: no expectation (no rail rate in the "
                                         "nodes' reports, no [fleet-probe] expected_busbw_gbps) and no other group in "
                                         "its round to compare with"))


def test_text_and_html_say_no_expectation_never_a_number() -> None:
    pairs = [{"hosts": ["a", "b"], "round": 1, "busbw_gbps": 1.859, "expected_gbps": None, "transport": "NET/Socket",
              "status": "unknown", "why": "no expectation"},
             {"hosts": ["c", "d"], "round": 1, "busbw_gbps": 120.0, "expected_gbps": None, "round_median_gbps": 300.0,
              "transport": "NET/IB/GDRDMA", "status": "fail"}]
    text = "\n".join(probe_text_lines({"pairs": pairs, "suspects": [], "rounds": [{"round": 1}]}))
    assert "a+b  1.859 GB/s (no expectation)  NET/Socket  unknown" in text
    assert "c+d  120 GB/s (no expectation; round median 300)  NET/IB/GDRDMA  fail" in text
    assert " of 1.859" not in text and " of None" not in text
    page = probe_html({"pairs": pairs, "suspects": []})
    assert "no expectation" in re.search(r"<p class=\"note\" id=\"pair-matrix-note\">([^<]*)</p>", page).group(1)
    cells = re.findall(r"<td data-status=\"(\w+)\" title=\"([^\"]*)\"[^>]*>([^<]*)</td>", page)
    assert sorted((status, label) for status, _, label in cells) == [("fail", "120"), ("fail", "120"),
                                                                     ("unknown", "1.86"), ("unknown", "1.86")]
    assert all("(no expectation" in title for _, title, _ in cells)
    # With an expectation the cells are shares of it.
    expected = [{**pairs[1], "expected_gbps": 360.0}]
    assert ">33%</td>" in probe_html({"pairs": expected, "suspects": []})


# ---- SHARP: said only where the fabric could use it -----------------------------------------

def member(host: str, **facts: object) -> NodeSummary:
    return NodeSummary(host, NodeGrade.PASS, probe={"status": "ok", "busbw_gbps": 350.0, "algorithm": "RING", **facts})


def measured(sharp_expected: bool, **facts: object) -> Measurement:
    answers = {host: member(host, **facts) for host in ("a", "b")}
    return _group_measurement(1, Group(("a", "b"), 29400), answers, sharp_expected)


@pytest.mark.parametrize("transport", ["NET/Socket", "NET/Libfabric/GDRDMA", "NET/GPUDirectTCPX"])
def test_no_sharp_claim_on_fabrics_that_cannot_reduce_in_the_network(transport: str) -> None:
    for sharp_expected in (False, True):
        measurement = measured(sharp_expected, transport=transport, net_plugin_missing=True, sharp=False)
        assert "SHARP" not in measurement.why and measurement.sharp is None
        [row] = pair_rows([measurement, Measurement(("c", "d"), 1, 350.0)], {h: FABRIC for h in "abcd"}, Thresholds(),
                          sharp_expected)[:1]
        assert "sharp" not in row and "SHARP" not in row.get("why", "")


def test_no_sharp_claim_on_infiniband_without_evidence_it_is_offered() -> None:
    # An IB fabric, no net plugin, nobody asked for CollNet: SHARP may not exist there.
    measurement = measured(False, transport="NET/IB/GDRDMA", net_plugin_missing=True, sharp=False)
    assert measurement.sharp is None and measurement.why == ""
    [row] = pair_rows([measurement], {"a": FABRIC, "b": FABRIC}, Thresholds(), sharp_expected=False)
    assert row["status"] == "pass" and "sharp" not in row and "why" not in row


def test_sharp_not_used_is_said_where_the_pack_or_nccl_says_the_fabric_offers_it() -> None:
    # The site's pack says the fabric offers SHARP: not used is news, and the pair warns.
    measurement = measured(True, transport="NET/IB/GDRDMA", net_plugin_missing=True, sharp=False)
    assert measurement.sharp is False
    assert measurement.why == "SHARP not used: NCCL found no net plugin (libnccl-net.so of nccl-rdma-sharp-plugins)"
    [row] = pair_rows([measurement], {"a": FABRIC, "b": FABRIC}, Thresholds(), sharp_expected=True)
    assert row["status"] == "warn" and row["sharp"] is False and row["why"] == measurement.why
    # NCCL's own log shows the SHARP plugin up (CollNet connected) though it chose RING.
    measurement = measured(False, transport="NET/IBext_v8/GDRDMA", sharp=False, sharp_initialized=True,
                           collnet_enable="1", net_plugin="/opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so")
    assert measurement.sharp is False and measurement.why == "SHARP plugin initialised, not used: NCCL chose RING for the measured size"
    # SHARP carried it: nothing to say.
    assert measured(True, transport="NET/IB/GDRDMA", sharp=True).why == ""


# ---- the real logs of a two-rank run on an H100 VM ------------------------------------------

def test_the_h100_socket_run_is_not_a_pass_has_no_expectation_and_no_sharp_claim() -> None:
    """The recorded run said both nodes `pass` at "100% of the expected bus bandwidth", its
    expectation the measured 1.859 GB/s, over NET/Socket; netdoctor's facts of its logs now say:"""
    recorded = json.loads((DEVICE / "fleet-probe.json").read_text())
    [pair] = recorded["probe"]["pairs"]
    assert pair["expected_gbps"] == pair["busbw_gbps"] and {node["grade"] for node in recorded["nodes"]} == {"pass"}
    answers = {host: NodeSummary(host, NodeGrade.PASS, probe={"status": "ok", "busbw_gbps": pair["busbw_gbps"],
                                                              **_facts((DEVICE / f"rank{rank}.log").read_text())})
               for rank, host in enumerate(pair["hosts"])}
    measurement = _group_measurement(1, Group(tuple(pair["hosts"]), 29400), answers, sharp_expected=False)
    assert measurement.transport == "NET/Socket" and measurement.why == SOCKETS and measurement.sharp is None
    fabrics = {host: NodeFabric(1) for host in pair["hosts"]}      # one GPU each, no RDMA rail
    [row] = pair_rows([measurement], fabrics, Thresholds(), sharp_expected=False)
    assert row["expected_gbps"] is None and row["status"] == "unknown" and "sharp" not in row
    assert "SHARP" not in row["why"] and SOCKETS in row["why"]
    verdicts = node_grades(pair["hosts"], [measurement], [], fabrics, Thresholds())
    for host, (grade, why) in verdicts.items():
        assert NodeGrade(grade).severity >= NodeGrade.WARN.severity, host
        assert "TCP sockets" in why and "100%" not in why
