"""The fleet page of 1,200 nodes in a real headless Chromium: the drift and rails tables list the
planted minority and miswired nodes, the dot plot has one dot per node (its one path parsed to
the end), the folded grid still counts and filters every node."""

from __future__ import annotations

import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from netdoctor.fleet.render import render_html
from test_fleet_html import CHROMIUM
from test_fleet_html_sections import CHANGES, fleet

# Written into a copy of the page by the test only: what the browser made of it.
PROBE_SCRIPT = """<script>
function put(name, value){document.body.setAttribute('data-' + name, value);}
function clean(e){return e.textContent.replace(/\\s+/g,' ').trim();}
function text(selector){return Array.prototype.map.call(document.querySelectorAll(selector), function(e){
  return e.tagName === 'TR' ? Array.prototype.map.call(e.cells, clean).join(' ') : clean(e);}).join(' | ');}
put('drift-rows', document.querySelectorAll('#drift tr').length - 1);
put('drift-minority', text('#drift tr.minority'));
put('drift-first', text('#drift tr:nth-child(2) td:first-child'));
put('rails-odd', text('#rails tr.odd'));
put('rails-clean', text('#rails-clean tr.clean'));
put('folded-open', [document.getElementById('drift-alike').open, document.getElementById('rails-alike').open].join(','));
put('folded-visible', [document.getElementById('rails-clean').checkVisibility(), document.querySelector('#drift-alike li').checkVisibility(), document.getElementById('rails').checkVisibility()].join(','));
function edge(selector){return document.querySelector(selector).getBoundingClientRect().top;}
put('tops', [edge('#wrong'), edge('#grid'), edge('#changes'), edge('#drift')].join(','));
put('changes', text('#changes tr.grade'));
var path = document.querySelector('#busbw-dots path.pass-dots');
var box = path.getBBox();
put('path-dots', (path.getAttribute('d').match(/h0/g) || []).length);
put('circles', document.querySelectorAll('#busbw-dots circle').length);
put('path-x0', box.x.toFixed(1)); put('path-x1', (box.x + box.width).toFixed(1));
put('labels', text('#busbw-dots text.label'));
put('fail-fill', getComputedStyle(document.querySelector('#busbw-dots circle.d-fail')).fill);
put('grid-rows', document.querySelectorAll('#grid tbody tr').length);
put('shown', document.getElementById('shown').textContent);
var box2 = document.getElementById('q'); box2.value = 'fail'; box2.dispatchEvent(new Event('input'));
put('shown-fail', document.getElementById('shown').textContent);
box2.value = ''; var only = document.getElementById('only'); only.checked = true; only.dispatchEvent(new Event('change'));
put('shown-problems', document.getElementById('shown').textContent);
</script>"""

MINORITY = ["node0017", "node0018"]


class BodyAttributes(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.body: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "body":
            self.body = {name: value or "" for name, value in attrs}


def dump_dom(page: str, tmp_path: Path) -> dict[str, str]:
    """The page (with PROBE_SCRIPT) loaded by headless Chromium; the body's attributes after."""
    probe_page = tmp_path / "fleet.html"
    probe_page.write_text(page.replace("</body>", PROBE_SCRIPT + "</body>"), encoding="utf-8")
    done = subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", probe_page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    parser = BodyAttributes()
    parser.feed(done.stdout)
    assert "data-shown-problems" in parser.body, "the probe script did not run to its end: " + done.stderr[-2000:]
    return parser.body


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_chromium_shows_drift_rails_dots_and_the_folded_grid(tmp_path: Path) -> None:
    failing = (7, 300, 301, 1150)
    report = fleet(count=1200, slow=(250, 900), failing=failing, width=4)
    report.drift = [
        {"what": "nccl", "among": "8x NVIDIA H100 80GB HBM3", "majority": "2.27.7", "minority": {}, "nodes": 1200},
        {"what": "hca_firmware", "among": "MT4129 MT_0000000838", "majority": "28.39.1002",
         "minority": {"28.37.1014": MINORITY}, "nodes": 1200},
    ]
    report.rails = [{"leaf": f"leaf-{leaf:02d}", "switch_guid": f"0x{leaf:x}", "rail": f"mlx5_{leaf % 8}", "ports": 32,
                     "odd": {"mlx5_2": ["node0044"]} if leaf == 7 else {}} for leaf in range(1, 41)]
    report.changes = CHANGES
    body = dump_dom(render_html(report), tmp_path)

    assert body["data-drift-rows"] == "1"                                 # nccl, alike everywhere, folded away
    assert body["data-drift-first"] == "hca_firmware"
    assert "28.37.1014: node[0017-0018]" in body["data-drift-minority"]
    assert body["data-rails-odd"] == "leaf-07 0x7 mlx5_7 32 mlx5_2 of node0044"
    assert len(body["data-rails-clean"].split(" | ")) == 8               # the other 39 leaves, one row per rail
    # What agrees everywhere is closed: the browser lays none of it out.
    assert body["data-folded-open"] == "false,false" and body["data-folded-visible"] == "false,false,true"
    # On screen, top to bottom: what is wrong, the grid, what changed, the drift.
    tops = [float(value) for value in body["data-tops"].split(",")]
    assert tops == sorted(tops) and len(set(tops)) == 4
    assert body["data-changes"].startswith("grade pass → fail node[017-018]")

    # One dot per node: the passing ones in the path, the others (failing, outliers) circles.
    assert int(body["data-path-dots"]) + int(body["data-circles"]) == 1200
    assert body["data-circles"] == str(len(failing) + 2)
    # The browser read the path to its last dot: it spans the plot's width.
    assert float(body["data-path-x0"]) < 60 and float(body["data-path-x1"]) > 940
    assert body["data-labels"] == "node0250 | node0900"
    assert body["data-fail-fill"] == "rgb(198, 40, 40)"

    # The grid folds 1,194 passing nodes into a few rows but still counts every node.
    assert int(body["data-grid-rows"]) < 20
    assert body["data-shown"] == "1200"
    assert body["data-shown-fail"] == str(len(failing))
    assert body["data-shown-problems"] == str(len(failing))
