"""The fleet report's sections on the fleet against itself and its past (drift, rails, what
changed), the bus bandwidth dot plot, and the grid folded at 1,000+ nodes: text and HTML."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import pytest

from netdoctor.fleet.html_parts import FOLD_AT
from netdoctor.fleet.model import BUSBW_METRIC, NodeGrade, NodeSummary, TopFinding, no_report
from netdoctor.fleet.outliers import robust_z_scores
from netdoctor.fleet.render import render_html, render_text
from netdoctor.fleet.report import FleetReport, build_fleet_report
from netdoctor.fleet.svg import busbw_dotplot_svg, outlier_band
from netdoctor.fleet.views import fold_hosts

HOSTILE = "\x1b]0;owned\x07<b>x</b>\u202e"
CHECKS = {"port-state": "pass", "link-speed": "pass", "pfc-ecn": "skip"}


def fleet(count: int = 40, slow: tuple[int, ...] = (33,), failing: tuple[int, ...] = (7,), width: int = 3) -> FleetReport:
    nodes = []
    for index in range(1, count + 1):
        host = f"node{index:0{width}d}"
        busbw = 300.0 if index in slow else 450.0 + index % 7
        if index in failing:
            top = TopFinding("port is down", "port-state", "mlx5_2:1")
            nodes.append(NodeSummary(host, NodeGrade.FAIL, top, {**CHECKS, "port-state": "fail"}, {"port-state": "port is down"},
                                     {BUSBW_METRIC: busbw}))
        else:
            nodes.append(NodeSummary(host, NodeGrade.PASS, None, dict(CHECKS), {}, {BUSBW_METRIC: busbw}))
    return build_fleet_report(nodes, generated_at="2026-11-25T06:00:00Z")


DRIFT = [
    {"what": "nccl", "among": "8x NVIDIA H100 80GB HBM3", "majority": "2.27.7", "minority": {}, "nodes": 40},
    {"what": "driver", "among": "8x NVIDIA H100 80GB HBM3", "majority": "580.95.05", "minority": {}, "nodes": 40,
     "minimum": "590.0", "below_minimum": [f"node{index:03d}" for index in range(1, 41)]},
    {"what": "hca_firmware", "among": "MT4129 MT_0000000838", "majority": "28.39.1002",
     "minority": {"28.37.1014": ["node017", "node018"]}, "nodes": 1024},
    {"what": "kernel", "among": "8x NVIDIA H100 80GB HBM3", "majority": "6.8.0-45-generic",
     "minority": {"5.15.0-122-generic": [f"node{index:03d}" for index in range(20, 30)], "5.15.0-100-generic": ["node031"]},
     "nodes": 40},
]
RAILS = [
    {"leaf": "leaf-01", "switch_guid": "0xb8cef603000a0001", "rail": "mlx5_0", "ports": 32, "odd": {}},
    {"leaf": "leaf-07", "switch_guid": "0xb8cef603000a0007", "rail": "mlx5_3", "ports": 32, "odd": {"mlx5_2": ["node044"]}},
    {"leaf": "leaf-09", "switch_guid": "0xb8cef603000a0009", "rail": "mlx5_0", "ports": 32, "odd": {}},
    {"leaf": "leaf-02", "switch_guid": "0xb8cef603000a0002", "rail": "mlx5_1", "ports": 32,
     "odd": {"mlx5_0": ["node001", "node002"], "mlx5_5": ["node003"]}},
    {"leaf": "leaf-33", "switch_guid": "0xb8cef603000a0033", "rail": "mlx5_0", "ports": 4, "odd": {}, "aligned": False},
]
CHANGES: dict[str, Any] = {
    "previous": {"source": "sweep-2026-11-24.json", "generated_at": "2026-11-24T06:00:00Z", "nodes": 1024},
    "grades": [{"host": "node003", "was": "fail", "now": "pass"}, {"host": "node001", "was": "pass", "now": "warn"},
               {"host": "node017", "was": "pass", "now": "fail"}, {"host": "node018", "was": "pass", "now": "fail"},
               {"host": "node019", "was": "warn", "now": "fail"}],
    "new_findings": [{"host": host, "check": "link-speed", "subject": "mlx5_3:1", "status": "fail",
                      "summary": "port runs at 200 Gb/s"} for host in ("node017", "node018")]
    + [{"host": "node001", "check": "mtu", "subject": "eth3", "status": "warn", "summary": "MTU 1500"}],
    "cleared_findings": [{"host": "node003", "check": "port-state", "subject": "mlx5_1:1", "status": "fail",
                          "summary": "port is Down"}],
    "versions": [{"host": f"node{index:03d}", "what": "hca_firmware", "was": "28.37.1014", "now": "28.39.1002"}
                 for index in (5, 6, 7)],
    "new_nodes": ["node041", "node042"],
    "gone_nodes": ["node099"],
}


# ---- text ----------------------------------------------------------------------------------

def test_text_says_what_changed_first_grade_changes_worst_first() -> None:
    report = fleet()
    report.changes = CHANGES
    lines = render_text(report).splitlines()
    heading = lines.index("What changed since 2026-11-24T06:00:00Z (sweep-2026-11-24.json, 1,024 nodes):")
    assert heading == 3                                  # right below the title and the counts
    assert lines.index("Failing or not answering (1):") > heading
    section = lines[heading:lines.index("Failing or not answering (1):")]
    assert section[1:5] == ["  Grades (5 nodes):",
                            "    pass -> fail  node[017-018]",
                            "    warn -> fail  node019",
                            "    pass -> warn  node001"]
    assert section[5] == "    fail -> pass  node003"
    assert "  New findings (3):" in section
    assert "    fail     link-speed mlx5_3:1: port runs at 200 Gb/s  on node[017-018]" in section
    assert section.index("    fail     link-speed mlx5_3:1: port runs at 200 Gb/s  on node[017-018]") < \
        section.index("    warn     mtu eth3: MTU 1500  on node001")
    assert "    fail     port-state mlx5_1:1: port is Down  on node003" in section
    assert "    hca_firmware 28.37.1014 -> 28.39.1002  on 3 nodes: node[005-007]" in section
    assert "  New nodes (2): node[041-042]" in section and "  Gone nodes (1): node099" in section


def test_text_changes_nothing_and_absent() -> None:
    report = fleet()
    assert "What changed" not in render_text(report)
    report.changes = {"previous": {"generated_at": "2026-11-24T06:00:00Z", "nodes": 40}, "grades": [], "new_findings": [],
                      "cleared_findings": [], "versions": [], "new_nodes": [], "gone_nodes": []}
    assert ("What changed since 2026-11-24T06:00:00Z (40 nodes): nothing (the same grades, findings, versions and nodes)"
            in render_text(report))


def test_text_version_drift_lists_only_differing_kinds_minorities_first() -> None:
    report = fleet()
    report.drift = DRIFT
    lines = render_text(report).splitlines()
    start = lines.index("Version drift:")
    assert lines[start + 1:start + 4] == [
        "  kernel among 8x NVIDIA H100 80GB HBM3: 6.8.0-45-generic on 29 nodes; 5.15.0-122-generic on 10 nodes: node[020-029];"
        " 5.15.0-100-generic on node031",
        "  hca_firmware among MT4129 MT_0000000838: 28.39.1002 on 1,022 nodes; 28.37.1014 on node[017-018]",
        "  driver among 8x NVIDIA H100 80GB HBM3: 580.95.05 on 40 nodes; below the minimum 590.0: 40 nodes: node[001-040]",
    ]
    assert "nccl" not in "\n".join(lines[start:])        # alike everywhere: nothing to say
    report.drift = [DRIFT[0]]
    assert "Version drift" not in render_text(report)


def test_text_rail_wiring_lists_only_odd_leaves() -> None:
    report = fleet()
    report.rails = RAILS
    lines = render_text(report).splitlines()
    start = lines.index("Rail wiring (2 leaves of 5 with ports of another rail):")
    assert lines[start + 1:] == ["  leaf-02 (rail mlx5_1): mlx5_0 of node[001-002]; mlx5_5 of node003",
                                 "  leaf-07 (rail mlx5_3): mlx5_2 of node044"]
    report.rails = [RAILS[0]]
    assert "Rail wiring" not in render_text(report)


def test_node_words_are_escaped_and_never_read_as_host_ranges() -> None:
    report = fleet()
    report.drift = [{"what": "kernel", "among": HOSTILE, "majority": HOSTILE, "minority": {HOSTILE: ["n[1-3]", HOSTILE]},
                     "nodes": 40}]
    report.rails = [{"leaf": HOSTILE, "switch_guid": None, "rail": HOSTILE, "ports": 2, "odd": {HOSTILE: ["a,b"]}}]
    report.changes = {"previous": {"generated_at": HOSTILE}, "grades": [{"host": HOSTILE, "was": HOSTILE, "now": "fail"}],
                      "new_findings": [{"host": "x", "check": HOSTILE, "status": "fail", "summary": HOSTILE}],
                      "versions": [{"host": "n[1-3]", "what": HOSTILE, "was": None, "now": HOSTILE}],
                      "new_nodes": [HOSTILE], "gone_nodes": ["@all"]}
    for rendered in (render_text(report), render_html(report)):
        assert not any(ord(char) < 0x20 and char != "\n" or 0x7f <= ord(char) < 0xa0 or char == "\u202e" for char in rendered)
        assert "\\x1b]0;owned\\x07" in rendered
        assert "n[1-3]" in rendered
    page = render_html(report)
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page
    # NodeSet would read `n[1-3]` as three nodes and `a,b` as two, `@all` as a group.
    assert fold_hosts(["n[1-3]", "n2"]) == "n2,n[1-3]" and fold_hosts(["a,b", "n1", "n2"]) == "n[1-2],a,b"
    assert fold_hosts(["@all"]) == "@all"


# ---- HTML ----------------------------------------------------------------------------------

class Tables(HTMLParser):
    """Rows of the tables by id: each row's class and its cells' text."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[tuple[str, list[str]]]] = {}
        self._table: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "table":
            self._table = attributes.get("id") or ""
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append((attributes.get("class") or "", []))
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._table is not None and self._cell is not None:
            self.tables[self._table][-1][1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def tables(page: str) -> dict[str, list[tuple[str, list[str]]]]:
    parser = Tables()
    parser.feed(page)
    return parser.tables


def test_html_drift_rails_and_changes_tables() -> None:
    report = fleet()
    report.drift, report.rails, report.changes = DRIFT, RAILS, CHANGES
    page = render_html(report)
    found = tables(page)
    drift = found["drift"][1:]
    assert [css for css, _ in drift] == ["minority", "minority", "below"]          # only the kinds that differ
    assert drift[0][1][0] == "kernel" and "10 nodes: node[020-029]" in drift[0][1][4] and "node031" in drift[0][1][4]
    assert drift[1][1] == ["hca_firmware", "MT4129 MT_0000000838", "28.39.1002", "1,022", "28.37.1014: node[017-018]", ""]
    assert drift[2][1][5] == "590.0: 40 nodes: node[001-040]"
    # The kind alike everywhere is folded away: a closed <details>, one line inside.
    alike = re.search(r"<details id=\"drift-alike\">(.*?)</details>", page).group(1)
    assert "<summary>1 alike on every node: nccl</summary>" in alike
    assert "<li>nccl 2.27.7 on all 40 nodes (8x NVIDIA H100 80GB HBM3)</li>" in alike
    rails = found["rails"][1:]
    assert rails[0] == ("odd", ["leaf-02", "0xb8cef603000a0002", "mlx5_1", "32", "mlx5_0 of node[001-002]mlx5_5 of node003"])
    assert rails[1] == ("odd", ["leaf-07", "0xb8cef603000a0007", "mlx5_3", "32", "mlx5_2 of node044"])
    assert len(rails) == 2
    # The leaves wired as expected are folded away, each leaf in one row only.
    assert found["rails-clean"][1:] == [("clean", ["leaf-[01,09]", "", "mlx5_0", "64", "none"]),
                                        ("clean", ["leaf-33", "", "not rail-aligned", "4", "none"])]
    assert re.search(r"<details id=\"rails-alike\"><summary>3 leaf switches with no port of another rail</summary>", page)
    for leaf in ("leaf-02", "leaf-07", "leaf-33"):
        assert page.count(leaf) == 1, leaf
    changes = found["changes"][1:]
    assert changes[0][1] == ["grade", "pass → fail", "node[017-018]"]
    assert [row[1][0] for row in changes] == ["grade"] * 4 + ["new finding"] * 2 + ["cleared", "version", "new nodes", "gone nodes"]
    # What is wrong and the grid first, then the news, then the fleet's self-judgement.
    order = ["id=\"wrong\"", "id=\"grid\"", "id=\"changes\"", "busbw-histogram", "id=\"drift\"", "id=\"rails\""]
    assert [page.index(mark) for mark in order] == sorted(page.index(mark) for mark in order)
    assert page.index("id=\"wrong\"") < page.index("<h2") + 100 < page.index("id=\"changes\"")


def test_html_leads_with_what_is_wrong_grouped_by_finding() -> None:
    report = fleet(count=60, failing=(7, 8, 9, 30))
    report.nodes.append(no_report("node099", NodeGrade.UNREACHABLE, "command timeout after 60 s"))
    report.drift, report.rails = DRIFT, RAILS
    page = render_html(report)
    first = page.index("<h2")
    assert page[first:].startswith("<h2 id=\"wrong-heading\">What is wrong</h2>")
    wrong = tables(page)["wrong"]
    assert wrong[0][1] == ["grade", "nodes (5 of 61)", "top finding"]
    assert [row[1] for row in wrong[1:]] == [["fail", "4 nodes: node[007-009,030]", "port-state mlx5_2:1: port is down"],
                                              ["unreachable", "node099", "command timeout after 60 s"]]
    # The fleet's own findings are pointed at, counted, never named twice.
    pointers = re.search(r"<ul id=\"fleet-wrong\">(.*?)</ul>", page).group(1)
    assert re.findall(r"<a href=\"#([\w-]+)\">", pointers) == ["outliers-heading", "drift-heading", "rails-heading"]
    assert "3 version kinds where like nodes differ" in pointers and "2 of 5 leaf switches" in pointers
    assert "leaf-07" not in pointers and "node033" not in pointers
    for anchor in re.findall(r"<a href=\"#([\w-]+)\">", page):
        assert f"id=\"{anchor}\"" in page, anchor
    # A fleet where every node passed says so, and still leads with it.
    quiet = render_html(fleet(count=5, slow=(), failing=()))
    assert "<p id=\"wrong\">nothing on the nodes: all 5 passed</p>" in quiet and "<ul id=\"fleet-wrong\">" not in quiet


def test_a_leaf_named_without_its_guid_by_one_node_is_still_one_leaf() -> None:
    """Node 4's neighbour source gave the switch's name only: its port lands on the leaf the other
    nodes name by GUID and name, so the leaf is one entry (it was two, `leaf-07` listed twice,
    one of them wired "odd"). A name given with two GUIDs (two ASICs of one box) is not merged."""
    guid = "0xb8cef603000a0007"

    def node(index: int, rails: list[tuple[str, int, str | None, str]]) -> NodeSummary:
        return NodeSummary(f"node{index:03d}", NodeGrade.PASS, None, dict(CHECKS),
                           rails=tuple((port, 400.0, gpu, leaf_guid, name) for port, gpu, leaf_guid, name in rails))

    nodes = [node(index, [("mlx5_0:1", 0, guid, "leaf-07"), ("mlx5_1:1", 1, "0x1", "leaf-08")]) for index in range(1, 4)]
    nodes.append(node(4, [("mlx5_0:1", 0, None, "leaf-07"), ("mlx5_1:1", 1, "0x1", "leaf-08")]))
    report = build_fleet_report(nodes, generated_at="2026-11-25T06:00:00Z")
    assert [(leaf["leaf"], leaf["switch_guid"], leaf["nodes"], leaf["odd"]) for leaf in report.rails] == [
        ("leaf-07", guid, 4, {}), ("leaf-08", "0x1", 4, {})]
    page = render_html(report)
    assert page.count(">leaf-07<") == 1 and "leaf-07" not in render_text(report)
    # Two switches that give one name (the ASICs of a director): two leaves, a name-only port on neither.
    twins = nodes[:3] + [node(4, [("mlx5_0:1", 0, "0x2", "leaf-07"), ("mlx5_1:1", 1, "0x1", "leaf-08")]),
                         node(5, [("mlx5_0:1", 0, None, "leaf-07"), ("mlx5_1:1", 1, "0x1", "leaf-08")])]
    leaves = build_fleet_report(twins, generated_at="x").rails
    assert sorted((leaf["switch_guid"] or "-", leaf["nodes"]) for leaf in leaves if leaf["leaf"] == "leaf-07") == [
        ("-", 1), ("0x2", 1), (guid, 3)]
    # Shown, each is told apart by its GUID: no name stands for two leaves.
    clean = tables(render_html(build_fleet_report(twins, generated_at="x")))["rails-clean"][1:]
    assert sorted(cells[0] for _, cells in clean) == [
        "3 leaves: leaf-07 (0xb8cef603000a0007),leaf-07 (0x2),leaf-07 (no GUID)", "leaf-08"]


def test_html_long_host_lists_open_on_a_click() -> None:
    report = fleet()
    many = [f"node{index:04d}" for index in range(1, 5001, 2)]
    report.drift = [{"what": "kernel", "among": "", "majority": "6.8", "minority": {"5.15": many}, "nodes": 10000}]
    page = render_html(report)
    cell = re.search(r"<tr class=\"minority\">.*?</tr>", page).group(0)
    assert "<details><summary>2,500 nodes: node[0001,0003," in cell
    assert "4997,4999]</details>" in cell                  # every host is in the page


def dots(page: str) -> tuple[int, int, list[tuple[float, float]]]:
    """(passing dots in the path, circles, the path's dots as absolute coordinates)."""
    svg = re.search(r"<svg id=\"busbw-dots\".*?</svg>", page, re.S).group(0)
    path = re.search(r"<path class=\"pass-dots\" d=\"([^\"]*)\"", svg)
    points: list[tuple[float, float]] = []
    if path:
        x = y = 0.0
        for command, dx, dy in re.findall(r"([Mm])(-?[\d.]+)[ ]?(-?[\d.]+)h0", path.group(1)):
            x, y = (float(dx), float(dy)) if command == "M" else (x + float(dx), y + float(dy))
            points.append((round(x, 1), round(y, 1)))
        assert len(points) == path.group(1).count("h0")
    return len(points), svg.count("<circle"), points


def test_dot_plot_one_dot_per_node_median_band_and_outlier_labels() -> None:
    report = fleet(count=60, slow=(33, 48), failing=(7,))
    page = render_html(report)
    passing, circles, points = dots(page)
    assert passing + circles == 60
    assert circles == 3                                   # node007 (fail), node033 and node048 (outliers)
    assert all(56 <= x <= 944 and 14 <= y <= 204 for x, y in points)
    assert [x for x, _ in points] == sorted(x for x, _ in points)     # host name order
    svg = re.search(r"<svg id=\"busbw-dots\".*?</svg>", page, re.S).group(0)
    assert re.findall(r"<text class=\"label\"[^>]*>([^<]*)</text>", svg) == ["node033", "node048"]
    assert "<rect class=\"band\"" in svg and "<line class=\"median\"" in svg
    assert "data-nodes=\"60\"" in svg


@pytest.mark.parametrize("values", [[450.0 + index % 7 for index in range(40)] + [300.0],
                                    [0.0] * 30 + [2.0, 5.0, 40.0]])    # MAD 0: the mean deviation stands in
def test_outlier_band_is_the_outlier_rules_own(values: list[float]) -> None:
    threshold = 3.5
    median, half = outlier_band(values, threshold)
    # The band's edges are exactly at the threshold of the robust z-score over the fleet.
    reference_median, reference = robust_z_scores(values)
    scale = next((value - reference_median) / score for value, score in zip(values, reference) if score)
    assert half == pytest.approx(threshold * abs(scale))
    assert [abs(score) > threshold for score in reference] == [abs(value - median) > half for value in values]


def test_dot_plot_without_enough_nodes_for_a_band() -> None:
    nodes = [NodeSummary(f"n{index}", NodeGrade.PASS, None, {}, {}, {BUSBW_METRIC: 400.0 + index}) for index in range(3)]
    svg = busbw_dotplot_svg(nodes, [], 3.5)
    assert "class=\"band\"" not in svg and "data-nodes=\"3\"" in svg and svg.count("h0") == 3
    assert busbw_dotplot_svg([no_report("x", NodeGrade.UNREACHABLE, "timeout")], [], 3.5) == ""


def grid_rows(page: str) -> list[tuple[str, str, int]]:
    """(grade, host cell, nodes the row stands for) per grid row."""
    return [(grade, host, int(count or 1)) for grade, count, host in
            re.findall(r"<tr data-g=\"(\w+)\"(?: data-n=\"(\d+)\")?[^>]*><td class=\"host\">([^<]*)</td>", page)]


def test_grid_folds_passing_nodes_into_ranges_from_a_thousand_nodes() -> None:
    failing = (7, 500, 501, 1100)
    report = fleet(count=1200, slow=(250,), failing=failing, width=4)
    report.nodes.append(NodeSummary("gpu-odd[1]", NodeGrade.PASS, None, dict(CHECKS)))
    report.nodes.append(NodeSummary("node9999", NodeGrade.PASS, None, {**CHECKS, "mtu": "unknown"}))
    rows = grid_rows(render_html(report))
    assert sum(count for *_, count in rows) == 1202
    own = [host for grade, host, count in rows if count == 1 and not host.startswith("node[")]
    assert {"node0007", "node0500", "node0501", "node1100"} <= set(own)       # failing nodes keep their rows
    assert "node0250" in own and "node9999" in own                           # an outlier; a pass with an unknown
    folded = [host for grade, host, count in rows if grade == "pass" and host.startswith("node[")]
    assert folded == ["node[0001-0006]", "node[0008-0249]", "node[0251-0499]", "node[0502-1099]", "node[1101-1200]"]
    assert "gpu-odd[1]" in own
    assert len(rows) < 20
    assert len(grid_rows(render_html(fleet(count=FOLD_AT - 1, width=4)))) == FOLD_AT - 1   # below: a row per node


def test_ten_thousand_nodes_make_a_small_page() -> None:
    report = fleet(count=10_000, slow=(1234, 5678, 9000), failing=tuple(range(5, 10_000, 97)), width=5)
    report.drift = [{"what": "kernel", "among": "", "majority": "6.8", "nodes": 10_000,
                     "minority": {"5.15": [f"node{index:05d}" for index in range(1, 10_001) if index % 40 < 20][:5000]}}]
    page = render_html(report)
    assert len(page.encode()) < 400_000, len(page)         # the unfolded page was ~3.6 MB
    passing, circles, _ = dots(page)
    assert passing + circles == 10_000
