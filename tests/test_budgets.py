"""Budgets, built as an attacker would: hostile snapshots and environments, each source and
each check bounded in time, memory and report size (docs/robustness.md, "Budgets").

The snapshots are copies of a fixture with one source blown up: a 10,000- or 100,000-entry
NCCL_IB_HCA, a 64 MB kernel log, 2 million lines of `nvidia-smi nvlink -s`. The CLI runs in
a child process whose peak RSS is read with getrusage(RUSAGE_CHILDREN).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from netdoctor.checks.api import Check, CheckContext
from netdoctor.checks.bounds import MAX_FINDINGS, MAX_TEXT_CHARS
from netdoctor.checks.engine import run_checks
from netdoctor.checks.registry import Registry
from netdoctor.errors import SnapshotError
from netdoctor.host.budgets import over_bytes
from netdoctor.host.live import LiveSource
from netdoctor.host.snapshot import open_snapshot, write_snapshot
from netdoctor.host.sources import SOURCES_BY_NAME
from netdoctor.host.types import CommandState
from netdoctor.inventory.build import build_inventory
from netdoctor.inventory.model import Inventory, SourceState
from netdoctor.parsers.kernel_log import MAX_EVENT_LINES, parse_kernel_log
from netdoctor.parsers.nccl_env import MAX_DEVICE_ENTRIES, MAX_IGNORED_LINES, nccl_settings, parse_device_filter
from netdoctor.report.model import Finding, Grade, Status, grade_of
from netdoctor.run import CheckOptions, run_check

FIXTURES = Path(__file__).parent / "fixtures" / "nodes"
FIXTURE = "dgx-h100-port-hdr"
CLI = [sys.executable, "-c", "import sys; from netdoctor.cli import main; main()"]
# Runs the CLI as its own child and prints that child's peak RSS: getrusage(RUSAGE_CHILDREN)
# in the test process would also count every earlier test's children.
RSS_WRAPPER = ("import resource, subprocess, sys\n"
               "code = subprocess.run(sys.argv[1:]).returncode\n"
               "sys.stderr.write(f'MAXRSS_KIB={resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\\n')\n"
               "sys.exit(code)\n")
EXPECTED_GRADE = tomllib.loads((FIXTURES / "INDEX.toml").read_text())["fixtures"][FIXTURE]["expect"]["grade"]
DMESG_LINE = b"2026-11-21T22:37:17,290000+00:00 mlx5_core 0000:18:00.0 ibp24s0: Link up and some more words\n"
NVLINK_LINE = b"\t Link 0: 26.562 GB/s\n"
MAX_RSS_BYTES = 400 * 1024 * 1024


def _snapshot(tmp_path: Path) -> Path:
    copy = tmp_path / "snap"
    shutil.copytree(FIXTURES / FIXTURE, copy, symlinks=True)
    return copy


def _hca_list(entries: int) -> str:
    return ",".join(f"mlx5_{index + 100}" for index in range(entries))


def _nccl_env(snapshot: Path, environ: dict[str, str]) -> None:
    (snapshot / "nccl-env.json").write_text(json.dumps({"environ": environ, "files": {}, "home": "/root"}))


def _cli(args: list[str], env: dict[str, str] | None = None,
         timeout_s: float = 120) -> tuple[subprocess.CompletedProcess[str], float, int]:
    """(the run, its wall time, the CLI process's peak RSS in bytes)."""
    environment = {**os.environ, "NO_COLOR": "1", **(env or {})}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", RSS_WRAPPER, *CLI, *args], capture_output=True, text=True,
                          env=environment, timeout=timeout_s)
    elapsed = time.monotonic() - started
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    rss = int(done.stderr.rsplit("MAXRSS_KIB=", 1)[1].split()[0]) * 1024
    print(f"{' '.join(args[:4])}: {elapsed:.2f} s, peak RSS {rss / 2**20:.0f} MiB, report {len(done.stdout):,} bytes")
    return done, elapsed, rss


def _findings(done: subprocess.CompletedProcess[str], check: str) -> list[dict[str, Any]]:
    return [finding for finding in json.loads(done.stdout)["findings"] if finding["check"] == check]


# -- findings bounded per check -----------------------------------------------------------------

def test_a_10000_entry_nccl_ib_hca_in_a_snapshot_is_one_small_finding(tmp_path: Path) -> None:
    snapshot = _snapshot(tmp_path)
    _nccl_env(snapshot, {"NCCL_IB_HCA": _hca_list(10_000)})      # 88 KB in one variable
    done, elapsed, rss = _cli(["check", "--no-probe", "--only", "nccl-env", "--snapshot", str(snapshot),
                               "--format", "json"])
    assert len(done.stdout) < 64 * 1024, f"{len(done.stdout)} bytes of report"
    [finding] = _findings(done, "nccl-env")
    assert finding["status"] == "fail" and finding["subject"] == "NCCL_IB_HCA"
    assert "of its 10,000 entries name no RDMA device" in finding["summary"]
    assert "more characters" in finding["summary"]                # the value is quoted cut, never whole
    assert finding["evidence"]["entries"] == 10_000
    assert elapsed < 10 and rss < MAX_RSS_BYTES, (elapsed, rss)


def test_a_10000_entry_nccl_ib_hca_in_the_environment_is_one_small_finding(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir(mode=0o755)
    done, elapsed, rss = _cli(["check", "--no-probe", "--only", "nccl-env", "--format", "json"],
                              env={"NCCL_IB_HCA": _hca_list(10_000), "PATH": str(empty),
                                   "NETDOCTOR_SYSFS_ROOT": str(FIXTURES / FIXTURE / "sys")})
    assert len(done.stdout) < 64 * 1024
    [finding] = _findings(done, "nccl-env")
    assert finding["status"] == "fail" and "of its 10,000 entries" in finding["summary"]
    assert elapsed < 10 and rss < MAX_RSS_BYTES, (elapsed, rss)


def test_device_lists_and_ignored_lines_are_kept_bounded_and_counted() -> None:
    selection = parse_device_filter("^" + _hca_list(100_000))
    assert selection.exclude and len(selection.entries) == MAX_DEVICE_ENTRIES and selection.count == 100_000
    assert parse_device_filter("a,,:1,b:2").count == 2                 # entries without a name are none
    settings = nccl_settings({}, {"/etc/nccl.conf": "NCCL not a setting\n" * 5_000})
    assert len(settings.ignored) == MAX_IGNORED_LINES and settings.ignored_more == 5_000 - MAX_IGNORED_LINES


def _flood(statuses: dict[Status, int], *, huge: int = 0) -> Check:
    """Yields `statuses` findings; the first `huge` of each status with a megabyte of text and evidence."""
    def function(context: CheckContext) -> Iterator[Finding]:
        number = 0
        for status, count in statuses.items():
            for index in range(count):
                number += 1
                big = index < huge
                yield context.finding(status, f"port{number}", "x" * (1_000_000 if big else 10),
                                      evidence={"values": list(range(100_000)), "text": "y" * 1_000_000} if big else {})
    return Check("flood", "floods the report", function)


class _Pack:
    required: frozenset[str] = frozenset()
    name = "test"

    def section(self, check_id: str) -> dict[str, Any]:
        return {}

    def is_shadow(self, check_id: str, rule: str | None = None) -> bool:
        return False


def _run_flood(statuses: dict[Status, int], **kwargs: Any) -> list[Finding]:
    registry = Registry()
    registry.register(_flood(statuses, **kwargs))
    findings, _ = run_checks(Inventory(host="n", captured_at="2026-11-21T22:40:00Z"), _Pack(), registry,  # type: ignore[arg-type]
                             deadline=time.monotonic() + 60)
    return findings


def test_the_engine_keeps_a_checks_worst_findings_and_folds_the_rest() -> None:
    findings = _run_flood({Status.PASS: 10_000, Status.WARN: 300, Status.FAIL: 1}, huge=3)
    assert len(findings) == MAX_FINDINGS
    *kept, folded = findings
    statuses = [finding.status for finding in kept]
    # The worst kept, and the first of each status: one pass says what the passes were.
    assert statuses.count(Status.FAIL) == 1 and statuses.count(Status.PASS) == 1
    assert statuses.count(Status.WARN) == MAX_FINDINGS - 3
    assert folded.status is Status.WARN and folded.subject == "node"
    assert folded.evidence["folded"] == 10_301 - (MAX_FINDINGS - 1)
    assert "9,999 pass" in folded.summary and f"{300 - (MAX_FINDINGS - 3)} warn" in folded.summary
    assert grade_of(findings, frozenset()) is Grade.FAIL
    # Each finding's text and evidence are cut, saying so.
    assert all(len(finding.summary) <= MAX_TEXT_CHARS + 40 for finding in findings)
    assert "more characters" in kept[0].summary and "more items not kept" in kept[0].evidence["values"][-1]
    assert len(json.dumps([finding.to_json() for finding in findings])) < 8 * 1024 * 1024


def test_folded_passes_keep_a_passing_grade() -> None:
    findings = _run_flood({Status.PASS: 1_000})
    assert len(findings) == MAX_FINDINGS and findings[-1].status is Status.PASS
    assert grade_of(findings, frozenset()) is Grade.PASS


# -- per-source budgets ------------------------------------------------------------------------------

def test_huge_sources_are_too_large_and_the_run_stays_within_its_deadline(tmp_path: Path) -> None:
    snapshot = _snapshot(tmp_path)
    (snapshot / "commands" / "dmesg.out").write_bytes(DMESG_LINE * (64_000_000 // len(DMESG_LINE)))
    nvlink = snapshot / "commands" / "nvidia-smi-nvlink-s.out"
    nvlink.write_bytes(nvlink.read_bytes().splitlines(keepends=True)[0] + NVLINK_LINE * 2_000_000)
    _nccl_env(snapshot, {"NCCL_IB_HCA": _hca_list(100_000)})
    done, elapsed, rss = _cli(["check", "--no-probe", "--snapshot", str(snapshot), "--deadline", "10",
                               "--format", "json"])
    assert elapsed < 10, f"{elapsed:.1f} s"
    assert rss < MAX_RSS_BYTES, f"peak RSS {rss / 2**20:.0f} MiB"
    report = json.loads(done.stdout)
    too_large = {finding["subject"]: finding["summary"] for finding in _findings(done, "discovery")}
    assert set(too_large) == {"dmesg", "nvidia-smi-nvlink-s", "nccl-env"}, too_large
    dmesg_bytes = len(DMESG_LINE) * (64_000_000 // len(DMESG_LINE))
    assert f"{dmesg_bytes:,} bytes, over its 32 MiB budget" in too_large["dmesg"]
    assert all("is too large" in summary for summary in too_large.values())
    [kernel] = _findings(done, "kernel-events")
    assert kernel["status"] == "unknown" and "dmesg is too large" in kernel["summary"]
    [nccl] = _findings(done, "nccl-env")
    assert nccl["status"] == "unknown" and "nccl-env is too large" in nccl["summary"]
    # NVML still gives every link: nvlink is judged without the second source.
    assert {finding["status"] for finding in _findings(done, "nvlink")} == {"pass"}
    # None of them is a required check: the grade is the fixture's own (exit 3 only for a required unknown).
    assert report["grade"] == EXPECTED_GRADE and done.returncode == Grade(EXPECTED_GRADE).exit_code


def test_line_and_byte_budgets_read_the_same_live_and_from_a_capture(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(mode=0o755)
    rows = {"nvidia-smi-nvlink-s": "yes '\t Link 0: 26.562 GB/s' | head -n 10001",      # over its lines only
            "dmesg": "head -c 40000000 /dev/zero | tr '\\0' 'x'",                          # over its bytes
            "ibdev2netdev": "echo 'mlx5_0 port 1 ==> ibp24s0 (Up)'"}                       # within both
    tools = {"nvidia-smi-nvlink-s": "nvidia-smi", "dmesg": "dmesg", "ibdev2netdev": "ibdev2netdev"}
    for name, script in rows.items():
        tool = bin_dir / tools[name]
        tool.write_text(f"#!/bin/sh\n{script}\n")
        tool.chmod(0o755)
    specs = [SOURCES_BY_NAME[name].expand() for name in rows]
    live = LiveSource(sys_root=tmp_path, record=True, path_env=f"{bin_dir}:/usr/bin:/bin", tool_timeout_s=30)
    seen = live.run(specs)
    assert live.recording is not None
    write_snapshot(live.recording, tmp_path / "capture", host="n", captured_at="2026-11-21T22:40:00Z", boot_id=None,
                   version="test")
    with open_snapshot(tmp_path / "capture") as snapshot:
        replayed = snapshot.run(specs)
    for name in rows:
        assert (seen[name].state, seen[name].stderr) == (replayed[name].state, replayed[name].stderr), name
    assert seen["nvidia-smi-nvlink-s"].state is CommandState.TOO_LARGE
    assert seen["nvidia-smi-nvlink-s"].stderr == "10,001 lines, over its 10,000-line budget"
    assert seen["dmesg"].state is CommandState.TOO_LARGE and seen["dmesg"].stderr == "32 MiB or more, over its budget"
    assert seen["ibdev2netdev"].state is CommandState.OK and replayed["ibdev2netdev"].stdout == seen["ibdev2netdev"].stdout


def test_a_kernel_log_storm_is_read_from_its_newest_end(tmp_path: Path) -> None:
    storm = "".join(f"2026-11-21T22:{minute:02d}:00,000000+00:00 mlx5_core 0000:18:00.0 ib{number}: Link down\n"
                    for minute in range(30, 40) for number in range(MAX_EVENT_LINES // 5))
    xid = "2026-11-21T21:00:00,000000+00:00 NVRM: Xid (PCI:0000:1b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
    parsed = parse_kernel_log(xid + storm)
    assert len(parsed.events) == MAX_EVENT_LINES and parsed.skipped == 1 + len(storm.splitlines()) - MAX_EVENT_LINES
    assert parsed.whole_from is not None and parsed.whole_from.minute == 35      # the newest five minutes were read
    snapshot = _snapshot(tmp_path)
    (snapshot / "commands" / "dmesg.out").write_text(xid + storm)
    report = run_check(CheckOptions(snapshot=snapshot, no_probe=True, only=("kernel-events",)))
    findings = [finding for finding in report.findings if finding.check == "kernel-events"]
    assert len(findings) <= MAX_FINDINGS
    unread = [finding for finding in findings if finding.status is Status.UNKNOWN]
    assert len(unread) == 1 and "were not read" in unread[0].summary and "GPU Xids" in unread[0].summary


def test_reports_over_their_budget_are_too_large_and_deep_json_is_refused(tmp_path: Path) -> None:
    snapshot = _snapshot(tmp_path)
    budget = SOURCES_BY_NAME["nvml"].max_output_bytes
    nvml = json.loads((snapshot / "nvml.json").read_text())
    (snapshot / "nvml.json").write_text(json.dumps({**nvml, "padding": "x" * budget}))
    with open_snapshot(snapshot) as source:
        inventory = build_inventory(source, needs=frozenset({"gpus"}))
    status = inventory.source("nvml")
    assert status.state is SourceState.TOO_LARGE and status.reason().startswith("nvml is too large: nvml.json: ")
    (snapshot / "nvml.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(SnapshotError, match="nests deeper"):
        open_snapshot(snapshot)


def test_budget_wording() -> None:
    assert over_bytes(10, 11) is None
    assert over_bytes(11, 11) == "11 bytes or more, over its budget"
    assert over_bytes(2 << 20, 1 << 20) == "2,097,152 bytes, over its 1 MiB budget"
