"""The text report an on-call admin reads in ten seconds: like findings grouped, subjects
folded, lines wrapped, a snapshot's capture time and a skipped required check in the header
(the same wherever the repository is cloned and whatever the width), skipped checks folded
into one line (-v lists them), a pass that judged little saying so; every text output
escapes control characters from the node."""

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


def cli(*args: str, columns: str | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it: stdout a pipe (no terminal), no COLUMNS unless given."""
    env = {"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "PYTHONPATH": str(REPO)}
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run([sys.executable, "-m", "netdoctor", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env=env)


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


def test_the_subject_is_factored_out_of_the_summary_and_each_subject_keeps_its_command() -> None:
    """One line for eight ports that say the same; the remedy a user pastes names each real
    netdev (a folded `ens[1-8]np0` is no interface), and the words they share come once."""
    findings = [Finding("pfc-ecn", Status.FAIL, f"ens{n}np0", f"PFC is off on RDMA priority 3 of ens{n}np0: lossy",
                        remedy=f"mlnx_qos -i ens{n}np0 --pfc 0,0,0,1,0,0,0,0 (and persist it)") for n in range(1, 9)]
    report = Report(host="n", grade=Grade.FAIL, started_at="2026-11-21T22:40:00Z", duration_s=0.1, rules="roce",
                    findings=findings)
    text = render_text(report, width=200)
    assert "fail     pfc-ecn  ens[1-8]np0  PFC is off on RDMA priority 3 of ens[1-8]np0: lossy" in text
    assert "ens[1-8]np0 --pfc" not in text
    lines = [line.strip() for line in text.splitlines()]
    start = lines.index("remedy: mlnx_qos -i ens1np0 --pfc 0,0,0,1,0,0,0,0")
    assert lines[start + 1:start + 9] == [f"mlnx_qos -i ens{n}np0 --pfc 0,0,0,1,0,0,0,0" for n in range(2, 9)] + \
        ["(and persist it)"]
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
def snapshot_report(path: str, captured_at: str | None = "2026-11-21T22:40:00Z") -> Report:
    return Report(host="dgx-h100-mtu-2048", grade=Grade.PASS, started_at="2026-11-26T15:07:08Z", duration_s=0.29,
                  rules="dgx-h100", findings=[Finding("mtu", Status.PASS, "mlx5_0:1")],
                  checks=[CheckOutcome("mtu", Status.PASS, 0.001, True)], snapshot=path, captured_at=captured_at)


@pytest.mark.parametrize("width", [40, 41, 60, 79, 100, 132, 200])
def test_capture_time_stays_on_its_line_whatever_the_path(width: int) -> None:
    """The header used to end `...PATH   captured TIME`, wrapped: a path of 59 to 79 characters
    at 100 columns (a clone 20 to 40 characters deep) put `captured` at the end of one line
    and its time on the next. The label now comes first and never depends on the path."""
    for length in range(1, 260):
        path = "/" + "p" * (length - 1)
        lines = render_text(snapshot_report(path), width=width).splitlines()
        at = next(index for index, line in enumerate(lines) if line.startswith("snapshot"))
        assert lines[at].startswith("snapshot captured 2026-11-21T22:40:00Z:"), (width, length, lines)
        assert max(len(line) for line in lines) <= width, (width, length)
        snapshot_lines = lines[at:lines.index("")]
        shown = snapshot_lines[0].partition(":00Z:")[2].strip() + "".join(line[2:] for line in snapshot_lines[1:])
        assert shown == path, (width, length)     # the whole path, nothing cut or added
    assert "\nsnapshot: /s\n" in render_text(snapshot_report("/s", None), width=width)


def test_snapshot_capture_time_in_the_header_and_json(tmp_path: Path) -> None:
    """End to end with snapshot paths of the lengths that used to break it (59-79 characters:
    a clone 20-40 characters deep) and a very long one, at 40 and 200 columns and with no
    COLUMNS; stdout is a pipe. The paths are relative to the working directory, so their
    lengths are exact wherever the test runs."""
    snapshot = NODES / "dgx-h100-mtu-2048"
    captured_at = json.loads((snapshot / "snapshot.json").read_text())["captured_at"]
    for length, columns in ((59, None), (70, None), (79, "40"), (230, "200"), (230, None)):
        name = "d" * 100 + "/" + "s" * (length - 101) if length > 200 else "s" * length
        link = tmp_path / f"{length}-{columns}" / name
        link.parent.mkdir(parents=True)
        link.symlink_to(snapshot)
        done = cli("check", "--no-probe", "--snapshot", name, columns=columns, cwd=link.parents[name.count("/")])
        assert done.returncode == 1, done.stderr
        header = done.stdout.split("\n\n", 1)[0].splitlines()
        at = next(index for index, line in enumerate(header) if line.startswith("snapshot"))
        assert header[at].startswith(f"snapshot captured {captured_at}:"), header
        assert "".join(line.strip() for line in header[at:]).endswith(name), header
        assert max(len(line) for line in done.stdout.splitlines()) <= int(columns or 100)
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


# -- checks that did not judge ---------------------------------------------------------------
NOTHING = ["pfc-ecn", "nvlink", "gpudirect", "nvswitch-fabric", "gpu-health", "gpu-driver", "gpu-nic-affinity",
           "fabric-netdevs", "pcie-p2p-path", "inventory", "nccl-probe"]
JUDGED = ["port-state", "link-speed", "pcie-link", "mtu", "error-counters", "kernel-events"]


def cpu_like_report(judged: list[str] = JUDGED, grade: Grade = Grade.PASS) -> Report:
    """A node most checks have nothing to judge on: 11 skipped for want of GPUs or RoCE, one
    not run (`--no-probe`, evidence `need: loopback` as the needs gate writes it)."""
    findings = [Finding(check, Status.PASS, "node") for check in judged]
    findings += [Finding(check, Status.SKIP, "node", f"no GPUs for {check}", {"need": "gpus"}) for check in NOTHING]
    findings.append(Finding("nic-loopback", Status.SKIP, "node", "the NIC loopback was not run: --no-probe",
                            {"need": "loopback"}))
    checks = [CheckOutcome(finding.check, finding.status, 0.001, finding.check == "port-state") for finding in findings]
    return Report(host="cpu01", grade=grade, started_at="2026-11-21T22:40:00Z", duration_s=0.1, rules="default",
                  findings=findings, checks=checks)


def test_skipped_checks_fold_into_one_line() -> None:
    report = cpu_like_report()
    lines = render_text(report, width=200).splitlines()
    assert not any(line.split()[1:2] == ["skip"] for line in lines if line.split())   # no skip rows
    assert lines[-1] == ("skipped: 11 checks, nothing to judge on this node; not run: nic-loopback "
                         "(-v lists them)")
    assert [line.split()[0] for line in lines[2:-1]] == JUDGED and lines[1] == ""
    assert report.to_json()["findings"][-1]["status"] == "skip"   # the JSON keeps every finding


def test_verbose_lists_each_skipped_check_with_its_reason() -> None:
    text = render_text(cpu_like_report(), width=200, verbose=True)
    assert "\nskipped: " in render(cpu_like_report(), "text") and "\nskipped: " not in render(
        cpu_like_report(), "text", verbose=True)   # what -v reaches through render()
    rows = {line.split()[0]: line.split(None, 2)[1:] for line in text.split("\n\n")[1].splitlines()}
    assert list(rows) == [*JUDGED, *NOTHING, "nic-loopback"]
    assert rows["nvlink"] == ["skip", "no GPUs for nvlink"]
    assert rows["nic-loopback"] == ["skip", "the NIC loopback was not run: --no-probe"]
    assert "skipped:" not in text and "-v lists them" not in text


def test_one_skipped_check_keeps_its_row() -> None:
    report = cpu_like_report()
    report.checks = [outcome for outcome in report.checks if outcome.check in (*JUDGED, "pfc-ecn")]
    text = render_text(report, width=200)
    assert "\npfc-ecn         skip     no GPUs for pfc-ecn\n" in text and "skipped:" not in text
    assert text.splitlines()[0].startswith("cpu01: PASS   rules")


@pytest.mark.parametrize(("judged", "grade", "shown"), [
    (JUDGED, Grade.PASS, "cpu01: PASS (6 of 18 checks judged)   rules default"),
    (JUDGED, Grade.WARN, "cpu01: WARN   rules default"),                      # only a pass claims too much
    (JUDGED + ["transceiver", "phy", "nccl-env"], Grade.PASS, "cpu01: PASS (9 of 21 checks judged)   rules"),
    (JUDGED + [f"judged-{n}" for n in range(6)], Grade.PASS, "cpu01: PASS   rules default"),   # 12 of 24: half
])
def test_a_pass_says_how_many_checks_judged_when_most_did_not(judged: list[str], grade: Grade, shown: str) -> None:
    assert render_text(cpu_like_report(judged, grade), width=200).startswith(shown)


def test_the_grade_line_says_both_a_required_check_left_out_and_how_many_judged() -> None:
    report = cpu_like_report()
    report.required_not_run = ("port-state",)
    text = render_text(report, color=True, width=200)
    assert text.startswith("cpu01: \033[32mPASS\033[0m (required check not run: port-state; 6 of 18 checks judged)")
    assert "\n\033[2mskipped: 11 checks, nothing to judge" in text   # the folded line is dim, as skip rows were


def test_checks_that_could_not_judge_count_against_the_pass() -> None:
    report = cpu_like_report(JUDGED[:4])
    report.findings.append(Finding("nccl-env", Status.UNKNOWN, "node", "nccl-env.json unreadable"))
    report.checks.append(CheckOutcome("nccl-env", Status.UNKNOWN, 0.001, False))
    assert render_text(report, width=200).startswith("cpu01: PASS (4 of 17 checks judged)")
    assert "\nunknown  nccl-env  node  nccl-env.json unreadable\n" in render_text(report, width=200)


def test_cpu_node_fixture_end_to_end() -> None:
    """The bundled CPU-only node: the grade line counts what the JSON says was judged. The
    path is relative to the repository (where cli() runs), so the lines never depend on where
    it was cloned."""
    snapshot = "tests/fixtures/nodes/cpu-node"
    report = json.loads(cli("check", "--no-probe", "--format", "json", "--snapshot", snapshot).stdout)
    statuses = [check["status"] for check in report["checks"]]
    judged = sum(status in ("pass", "warn", "fail") for status in statuses)
    assert report["grade"] == "pass" and judged * 2 < len(statuses)
    done = cli("check", "--no-probe", "--snapshot", snapshot)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"cpu-node: PASS ({judged} of {len(statuses)} checks judged)")
    assert len(lines) == 4 + judged and lines[-1].startswith(f"skipped: {statuses.count('skip') - 1} checks, "
                                                             "nothing to judge on this node; not run: nic-loopback")


def test_verbose_flag_reaches_the_text_report() -> None:
    """`-v` lists the skipped checks: before the command (the global option) and after it."""
    snapshot = str(NODES / "cpu-node")
    skipped = [check["check"] for check in json.loads(cli("check", "--no-probe", "--format", "json", "--snapshot",
                                                          snapshot).stdout)["checks"] if check["status"] == "skip"]
    for argv in (["-v", "check"], ["check", "-v"]):
        done = cli(*argv, "--no-probe", "--snapshot", snapshot)
        assert done.returncode == 0, done.stderr
        rows = [line.split()[0] for line in done.stdout.splitlines() if line.split()[1:2] == ["skip"]]
        assert rows == skipped and "skipped:" not in done.stdout, argv


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
