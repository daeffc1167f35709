"""The HTML fleet page rendered by a real headless Chromium: names shown, cells colored by status."""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from netdoctor.fleet.model import BUSBW_METRIC, NodeGrade, NodeSummary, TopFinding, no_report
from netdoctor.fleet.render import render_html
from netdoctor.fleet.report import build_fleet_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

# Written into a copy of the page by the test only: record what the browser computed.
PROBE_SCRIPT = """<script>
document.querySelectorAll('#grid td.c').forEach(function(cell){
  cell.setAttribute('data-bg', getComputedStyle(cell).backgroundColor);
});
document.body.setAttribute('data-rows-shown', document.getElementById('shown').textContent);
document.body.setAttribute('data-svg-bars', document.querySelectorAll('#busbw-histogram rect.bar').length);
document.body.setAttribute('data-header-position', getComputedStyle(document.querySelector('#grid th')).position);
var box=document.getElementById('q'); box.value='fail'; box.dispatchEvent(new Event('input'));
document.body.setAttribute('data-filter-fail', document.getElementById('shown').textContent);
box.value='gpu04'; box.dispatchEvent(new Event('input'));
document.body.setAttribute('data-filter-gpu04', document.getElementById('shown').textContent);
var only=document.getElementById('only'); box.value=''; only.checked=true; only.dispatchEvent(new Event('change'));
document.body.setAttribute('data-filter-problems', document.getElementById('shown').textContent);
</script>"""


class CellCollector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.cells: list[tuple[str, str]] = []
        self.body: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {name: value or "" for name, value in attrs}
        if tag == "td" and "data-bg" in attributes:
            status = next(part[2:] for part in attributes["class"].split() if part.startswith("s-"))
            self.cells.append((status, attributes["data-bg"]))
        if tag == "body":
            self.body = attributes


def fleet_nodes() -> list[NodeSummary]:
    nodes = [
        NodeSummary(f"gpu{i:03d}", NodeGrade.PASS, None,
                    {"port-state": "pass", "link-speed": "pass", "pfc-ecn": "skip"}, {}, {BUSBW_METRIC: 450.0 + i % 5})
        for i in range(1, 41)
    ]
    nodes.append(NodeSummary("gpu041", NodeGrade.FAIL, TopFinding("port is down", "port-state", "mlx5_2:1"),
                             {"port-state": "fail", "link-speed": "warn", "pfc-ecn": "skip"}, {"port-state": "port is down"},
                             {BUSBW_METRIC: 300.0}))
    nodes.append(NodeSummary("gpu042", NodeGrade.UNKNOWN, TopFinding("ibstat timed out", "link-speed", "node"),
                             {"port-state": "pass", "link-speed": "unknown"}, {}, {}))
    nodes.append(no_report("gpu043", NodeGrade.UNREACHABLE, "command timeout after 60 s"))
    return nodes


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_headless_chromium_renders_the_grid_with_status_colors(tmp_path: Path) -> None:
    page = render_html(build_fleet_report(fleet_nodes(), generated_at="2026-11-21T23:00:00Z"))
    probe_page = tmp_path / "fleet.html"
    probe_page.write_text(page.replace("</body>", PROBE_SCRIPT + "</body>"))
    profile = tmp_path / "profile"
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--dump-dom", probe_page.as_uri()],
        capture_output=True, text=True, timeout=90,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    for host in ("gpu001", "gpu040", "gpu041", "gpu042", "gpu043"):
        assert f">{host}</td>" in dom
    parser = CellCollector()
    parser.feed(dom)
    colors: dict[str, set[str]] = {}
    for status, color in parser.cells:
        colors.setdefault(status, set()).add(color)
    # Each status has exactly one color, and the colors are the page's palette.
    assert colors == {
        "pass": {"rgb(46, 125, 50)"},
        "warn": {"rgb(249, 168, 37)"},
        "fail": {"rgb(198, 40, 40)"},
        "unknown": {"rgb(106, 27, 154)"},
        "skip": {"rgb(207, 216, 220)"},
        "none": {"rgb(245, 245, 245)"},
    }
    assert len([1 for status, _ in parser.cells if status == "fail"]) == 1
    assert parser.body["data-rows-shown"] == "43"          # the filter script ran over every row
    assert int(parser.body["data-svg-bars"]) >= 2          # histogram: the fleet and the slow node
    assert parser.body["data-header-position"] == "sticky"
    assert parser.body["data-filter-fail"] == "1"
    assert parser.body["data-filter-gpu04"] == "4"          # gpu040..gpu043
    assert parser.body["data-filter-problems"] == "3"
    assert re.search(r'<tr data-g="fail"><td class="host">gpu041</td>', dom)
