"""The text report an on-call admin reads in ten seconds: like findings grouped, subjects
folded, lines wrapped, a snapshot's capture time and a skipped required check in the header;
every text output escapes control characters from the node."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from inventory_factory import dgx_h100
from netdoctor.inventory.render import render_inventory_text
from netdoctor.report.model import CheckOutcome, Finding, Grade, Report, Status
from netdoctor.report.render import render
from netdoctor.report.text import fold_subjects, render_text
from netdoctor.textsafe import safe_text

REPO = Path(__file__).resolve().parents[1]
NODES = REPO / "tests" / "fixtures" / "nodes"
MTU_REMEDY = ("the subnet manager or switch caps the MTU: set the partition MTU to 4096 (mtu=5 in opensm "
              "partitions.conf, or the UFM PKey MTU) and check the switch port's MTU cap")


def cli(*args: str, columns: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "NO_COLOR": "1"}
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run([sys.executable, "-m", "netdoctor", *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env=env)


def mtu_report(ports: list[str]) -> Report:
    findings = [Finding("mtu", Status.WARN, port, "IB active MTU is 2048, expected 4096", {"active_mtu": 2048},
                        MTU_REMEDY) for port in ports]
    findings.append(Finding("mtu", Status.PASS, "mlx5_1:1"))
    return Report(host="node017", grade=Grade.WARN, started_at="2026-11-21T22:40:00Z", duration_s=0.3,
                  rules="dgx-h100", findings=findings, checks=[CheckOutcome("mtu", Status.WARN, 0.001, True)])


# -- grouping and folding ----------------------------------------------------------------
@pytest.mark.parametrize(("subjects", "folded"), [
    ([f"mlx5_{n}:1" for n in range(8)], ["mlx5_[0-7]:1"]),
    (["mlx5_0:1", "mlx5_3:1", "mlx5_4:1", "mlx5_9:1", "mlx5_10:1", "mlx5_11:1"], ["mlx5_[0,3-4,9-11]:1"]),
    (["mlx5_0:1", "mlx5_0:2"], ["mlx5_0:[1-2]"]),
    (["GPU0", "GPU1", "GPU3", "node"], ["GPU[0-1,3]", "node"]),
    (["n08", "n09", "n10"], ["n[08-10]"]),
    (["ens1f0np0"], ["ens1f0np0"]),
    (["0000:18:00.0", "0000:19:00.0", "0000:2a:00.0"], ["0000:[18-19]:00.0", "0000:2a:00.0"]),
])
def test_fold_subjects(subjects: list[str], folded: list[str]) -> None:
    assert fold_subjects(subjects) == folded


def test_one_cause_on_eight_ports_is_one_line_and_one_remedy() -> None:
    report = mtu_report([f"mlx5_{n}:1" for n in (0, 3, 4, 5, 6, 9, 10, 11)])
    text = render_text(report, width=200)
    problem_lines = [line for line in text.splitlines() if line.startswith("warn")]
    assert problem_lines == ["warn     mtu  mlx5_[0,3-6,9-11]:1  IB active MTU is 2048, expected 4096"]
    assert text.count("remedy:") == 1
    # The JSON report stays one finding per subject (the contract).
    assert len([item for item in report.to_json()["findings"] if item["status"] == "warn"]) == 8


def test_findings_that_differ_are_not_grouped() -> None:
    report = mtu_report(["mlx5_0:1", "mlx5_3:1"])
    report.findings.append(Finding("mtu", Status.WARN, "mlx5_4:1", "IB active MTU is 1024, expected 4096",
                                   remedy=MTU_REMEDY))
    report.findings.append(Finding("mtu", Status.FAIL, "mlx5_5:1", "IB active MTU is 2048, expected 4096",
                                   remedy=MTU_REMEDY))
    lines = [line for line in render_text(report, width=200).splitlines() if line.startswith(("warn", "fail"))]
    assert [line.split()[:3] for line in lines] == [["fail", "mtu", "mlx5_5:1"], ["warn", "mtu", "mlx5_[0,3]:1"],
                                                    ["warn", "mtu", "mlx5_4:1"]]


def test_the_subject_is_factored_out_of_summary_and_remedy() -> None:
    findings = [Finding("pfc-ecn", Status.FAIL, f"ens{n}np0", f"PFC is off on RDMA priority 3 of ens{n}np0",
                        remedy=f"mlnx_qos -i ens{n}np0 --pfc 0,0,0,1,0,0,0,0") for n in range(1, 9)]
    report = Report(host="n", grade=Grade.FAIL, started_at="2026-11-21T22:40:00Z", duration_s=0.1, rules="roce",
                    findings=findings)
    text = render_text(report, width=200)
    assert "fail     pfc-ecn  ens[1-8]np0  PFC is off on RDMA priority 3 of ens[1-8]np0" in text
    assert "remedy: mlnx_qos -i ens[1-8]np0 --pfc 0,0,0,1,0,0,0,0" in text
    assert text.count("remedy:") == 1


def test_mtu_fixture_prints_one_line_for_its_eight_ports() -> None:
    done = cli("check", "--no-probe", "--snapshot", str(NODES / "dgx-h100-mtu-2048"))
    assert done.returncode == 1, done.stderr
    warn_lines = [line for line in done.stdout.splitlines() if line.startswith("warn")]
    assert len(warn_lines) == 1 and "mlx5_[0,3-6,9-11]:1" in warn_lines[0]
    assert done.stdout.count("remedy:") == 1


# -- width -------------------------------------------------------------------------------
@pytest.mark.parametrize("columns", ["60", "80", "132"])
def test_lines_fit_the_terminal(columns: str) -> None:
    done = cli("check", "--no-probe", "--snapshot", str(NODES / "dgx-h100-counters-saturated"), columns=columns)
    assert done.returncode == 3, done.stderr
    assert max(len(line) for line in done.stdout.splitlines()) <= int(columns)
    assert "remedy: record the counters" in done.stdout


def test_not_a_terminal_gets_a_sensible_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    long = Finding("mtu", Status.WARN, "mlx5_0:1", "word " * 100, remedy="fix " * 100)
    report = Report(host="n", grade=Grade.WARN, started_at="2026-11-21T22:40:00Z", duration_s=0.1, rules="x",
                    findings=[long])
    text = render_text(report)   # pytest's stdout is no terminal
    assert max(len(line) for line in text.splitlines()) <= 100
    assert text.count("word") == 100 and text.count("fix") == 100   # wrapped, nothing cut


def test_color_survives_wrapping() -> None:
    text = render_text(mtu_report(["mlx5_0:1"]), color=True, width=60)
    assert "\033[33mwarn   \033[0m  mtu" in text


# -- header --------------------------------------------------------------------------------
def test_snapshot_capture_time_in_the_header_and_json() -> None:
    snapshot = NODES / "dgx-h100-mtu-2048"
    captured_at = json.loads((snapshot / "snapshot.json").read_text())["captured_at"]
    text = cli("check", "--no-probe", "--snapshot", str(snapshot)).stdout
    header = text.split("\n\n", 1)[0]
    assert f"captured {captured_at}" in header
    report = json.loads(cli("check", "--no-probe", "--format", "json", "--snapshot", str(snapshot)).stdout)
    assert report["snapshot_captured_at"] == captured_at


def test_a_skipped_required_check_shows_in_the_grade_line() -> None:
    snapshot = str(NODES / "dgx-h100-port-down")
    done = cli("check", "--no-probe", "--snapshot", snapshot, "--skip", "port-state")
    assert done.returncode == 0   # the grade is what the run saw; the line says what it did not look at
    assert done.stdout.splitlines()[0].startswith("dgx-h100-port-down: PASS (required check not run: port-state)")
    report = json.loads(cli("check", "--no-probe", "--format", "json", "--snapshot", snapshot,
                            "--skip", "port-state,mtu").stdout)
    assert report["required_not_run"] == ["port-state"]
    plain = json.loads(cli("check", "--no-probe", "--format", "json", "--snapshot", snapshot, "--skip", "mtu").stdout)
    assert "required_not_run" not in plain


# -- control characters ----------------------------------------------------------------------
HOSTILE = "mlx5_0\x1b]0;owned\x07\x1b[2J\r\nfail  fake-check  all good\x9b\u202e"


@pytest.mark.parametrize(("raw", "shown"), [
    ("plain text, 100 Gb/s", "plain text, 100 Gb/s"),
    ("\x1b[2J", "\\x1b[2J"),
    ("a\nb\rc\td", "a\\nb\\rc\\td"),
    ("\x07\x7f\x9b", "\\x07\\x7f\\x9b"),
    ("\u202eevil", "\\u202eevil"),
    (b"caf\xe9".decode("utf-8", "surrogateescape"), "caf\\xe9"),
])
def test_safe_text(raw: str, shown: str) -> None:
    assert safe_text(raw) == shown
    assert safe_text(safe_text(raw)) == safe_text(raw)


def hostile_report() -> Report:
    findings = [Finding("mtu", Status.WARN, HOSTILE, f"MTU of {HOSTILE} is 1500", {"netdev": HOSTILE},
                        remedy=f"ip link set {HOSTILE} mtu 9000"),
                Finding("pfc-ecn", Status.SKIP, "node", f"no RoCE ports ({HOSTILE})")]
    return Report(host="node\x1b[31m17", grade=Grade.WARN, started_at="2026-11-21T22:40:00Z", duration_s=0.1,
                  rules=f"pack{HOSTILE}", findings=findings, snapshot=f"/tmp/snap{HOSTILE}",
                  captured_at="2026-11-21T22:40:00Z",
                  checks=[CheckOutcome("mtu", Status.WARN, 0.001, False), CheckOutcome("pfc-ecn", Status.SKIP, 0.0, False)])


def _no_raw_controls(text: str, allowed: str = "\n") -> None:
    bad = [character for character in text if (ord(character) < 0x20 and character not in allowed)
           or 0x7f <= ord(character) <= 0x9f or character in "\u202e"]
    assert not bad, bad


def test_text_report_escapes_node_text() -> None:
    text = render(hostile_report(), "text")
    _no_raw_controls(text)
    assert "\\x1b]0;owned\\x07" in text
    assert not any(line.lstrip().startswith("fail") for line in text.splitlines())   # no forged line


def test_text_report_keeps_its_own_colors_only() -> None:
    text = render(hostile_report(), "text", color=True)
    assert "\033[33m" in text   # our color
    assert "\033]0;" not in text and "\033[2J" not in text and "\033[31m17" not in text


def test_junit_is_valid_xml_without_controls() -> None:
    text = render(hostile_report(), "junit")
    _no_raw_controls(text)
    root = ElementTree.fromstring(text.split("?>", 1)[1])
    assert root.find(".//testsuite").get("hostname") == "node\\x1b[31m17"


def test_prometheus_labels_without_controls() -> None:
    text = render(hostile_report(), "prometheus")
    _no_raw_controls(text)
    assert 'subject="mlx5_0\\\\x1b]0;owned' in text


def test_discover_text_escapes_device_names() -> None:
    inventory = dgx_h100(host="node\x1b]2;owned\x07")
    text = render_inventory_text(inventory)
    _no_raw_controls(text)
    assert text.startswith("host node\\x1b]2;owned\\x07")


def test_hostile_snapshot_host_name_is_escaped_end_to_end(tmp_path: Path) -> None:
    snapshot = tmp_path / "snap"
    shutil.copytree(NODES / "dgx-h100-mtu-2048", snapshot, symlinks=True)
    meta = json.loads((snapshot / "snapshot.json").read_text())
    meta["host"] = "gpu07\x1b]0;pwned\x07\nfake: PASS"
    (snapshot / "snapshot.json").write_text(json.dumps(meta))
    for command in (["check", "--no-probe"], ["discover"]):
        done = cli(*command, "--snapshot", str(snapshot))
        assert done.returncode in (0, 1), done.stderr
        _no_raw_controls(done.stdout)
        assert "gpu07\\x1b]0;pwned\\x07\\nfake: PASS" in done.stdout
