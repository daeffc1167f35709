"""nic-loopback: per-rail traffic, GPU memory -> NIC -> GPU memory.

The engines' outputs are read from real formats: NCCL's channel lines (real multi-node logs
in tests/data/corpus/nccl-log) and perftest's table (tests/data/corpus/perftest). The whole
check runs on the dgx-h100 fixture as a live node (its sys tree, fake tools on PATH) with
a stand-in worker (tests/fakebin/fake_nccl_worker.py: the worker's config/result protocol,
NCCL's log lines) and a fake ib_write_bw: GDR used, GDR silently not used, one rail at half
its siblings, no engine at all.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from corpus_util import corpus_dir
from fake_tools import live_source_for
from netdoctor.host.types import CommandResult, CommandState
from netdoctor.probe.engine import WorkerRun
from netdoctor.probe.loopback import Rail, rail_from_perftest, rail_from_runs, waves
from netdoctor.run import CheckOptions, run_check

FIXTURES = Path(__file__).parent / "fixtures" / "nodes"
FAKE_WORKER = Path(__file__).parent / "fakebin" / "fake_nccl_worker.py"
RAILS = ("mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11")
RAIL = Rail("mlx5_3:1", "mlx5_3", 1, 1, "PIX in nvidia-smi topo -m", 400.0)


def _log(name: str) -> str:
    return (corpus_dir("nccl-log") / name).read_text()


def _run(log: str, busbw: float = 46.0) -> WorkerRun:
    result = {"status": "ok", "reason": "", "gpus": [1], "sizes": [
        {"bytes": 1 << 28, "time_us": 5000.0, "algbw_gbps": busbw, "busbw_gbps": busbw, "verified": True}]}
    return WorkerRun("ok", result, log, 0, 1.0)


@pytest.mark.parametrize(("name", "transport", "gdr"), [
    ("nccl-tests-issue-350__gdrdma-enabled-for-gpu-2-nodes.txt", "NET/IB/GDRDMA", True),
    ("nv_peer_memory-issue-56__ring-net-ib-gdr-disabled-distance.txt", "NET/IB", False),
    ("esm2-worker__net-socket-4-ranks.txt", "NET/Socket", False),
])
def test_the_rail_transport_is_read_from_real_nccl_logs(name: str, transport: str, gdr: bool) -> None:
    rail = rail_from_runs(RAIL, [_run(_log(name)), _run(_log(name), 44.0)], 5.0)
    assert (rail.status, rail.transport, rail.gdr, rail.bandwidth_gbps) == ("ok", transport, gdr, 352.0)


def test_one_rank_failing_makes_the_rail_an_error_with_ncclls_reason() -> None:
    failed = WorkerRun("ok", {"status": "error", "reason": "NCCL ncclCommInitRank failed: unhandled system error",
                              "reason_code": "nccl"}, "", 0, 1.0)
    rail = rail_from_runs(RAIL, [_run(""), failed], 5.0)
    assert rail.status == "error" and "unhandled system error" in rail.reason and rail.code == ""


def test_perftest_on_real_output_and_a_refused_gpu_registration() -> None:
    text = (corpus_dir("perftest") / "lab-blog__ib_write_bw-4qp-rdma-cm-363gbps.txt").read_text()
    ok = CommandResult("server", CommandState.OK, text), CommandResult("client", CommandState.OK, text)
    rail = rail_from_perftest(RAIL, *ok)
    assert (rail.status, rail.bandwidth_gbps, rail.gdr) == ("ok", 363.5, True)
    refused = CommandResult("client", CommandState.ERROR, "", " Couldn't allocate MR\n", 1)
    rail = rail_from_perftest(RAIL, ok[0], refused)
    assert rail.status == "error" and rail.gdr is False and "Couldn't allocate MR" in rail.reason
    missing = CommandResult("server", CommandState.MISSING, "")
    assert rail_from_perftest(RAIL, missing, None).code == "not-installed"


def test_two_nics_per_gpu_run_in_two_waves() -> None:
    rails = tuple(Rail(f"mlx5_{index}:1", f"mlx5_{index}", 1, index // 2, "PIX", 200.0) for index in range(4))
    assert [[rail.port for rail in wave] for wave in waves(rails)] == [["mlx5_0:1", "mlx5_2:1"], ["mlx5_1:1", "mlx5_3:1"]]


# -- the check on the dgx-h100 fixture as a live node ------------------------------------------------

def _scenario(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **scenario: object) -> None:
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(scenario))
    monkeypatch.setenv("NETDOCTOR_FAKE_SCENARIO", str(path))
    monkeypatch.setenv("NETDOCTOR_PROBE_WORKER", str(FAKE_WORKER))


def _check(tmp_path: Path, *, only: str = "nic-loopback", no_probe: bool = False) -> dict[str, list]:
    source = live_source_for(FIXTURES / "dgx-h100", tmp_path / "bin")
    report = run_check(CheckOptions(only=(only,), no_probe=no_probe, deadline_s=60), source=source)
    findings: dict[str, list] = {}
    for finding in report.findings:
        findings.setdefault(finding.subject, []).append(finding)
    return findings


def _healthy(**changes: dict) -> dict:
    rails = {name: {"busbw_gbps": 46.5, "via": "NET/IB/0/GDRDMA"} for name in RAILS}
    rails.update(changes)
    return rails


def test_gdr_used_on_every_rail_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _scenario(tmp_path, monkeypatch, rails=_healthy())
    findings = _check(tmp_path)
    assert sorted(findings) == sorted(f"{name}:1" for name in RAILS)          # storage ports not tested
    finding = findings["mlx5_3:1"][0]
    assert finding.status.value == "pass" and "372 Gb/s" in finding.summary and "NET/IB/GDRDMA" in finding.summary
    assert finding.evidence["gpu"] == "GPU1"                                   # mlx5_3 is PIX to GPU1


def test_gdr_silently_not_used_fails_naming_the_nic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _scenario(tmp_path, monkeypatch, rails=_healthy(mlx5_4={"busbw_gbps": 30.1, "via": "NET/IB/0"}))
    findings = _check(tmp_path)
    failed = [finding for group in findings.values() for finding in group if finding.status.value != "pass"]
    assert [(finding.subject, finding.status.value) for finding in failed] == [("mlx5_4:1", "fail")]
    assert "GPUDirect RDMA was not used between GPU2" in failed[0].summary
    assert failed[0].rule == "gdr_not_used_severity"


def test_a_rail_at_half_its_siblings_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _scenario(tmp_path, monkeypatch, rails=_healthy(mlx5_9={"busbw_gbps": 23.2, "via": "NET/IB/0/GDRDMA"}))
    finding = _check(tmp_path)["mlx5_9:1"][0]
    assert finding.status.value == "fail" and "50% of the node's other rails" in finding.summary


def test_no_engine_is_unknown_never_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _scenario(tmp_path, monkeypatch, no_nccl=True)
    findings = _check(tmp_path)
    assert [(finding.status.value, finding.subject) for finding in findings["node"]] == [("unknown", "node")]
    assert "no traffic engine" in findings["node"][0].summary and "ib_write_bw" in findings["node"][0].summary


def test_without_nccl_perftest_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _scenario(tmp_path, monkeypatch, no_nccl=True)
    output = (corpus_dir("perftest") / "lab-blog__ib_write_bw-4qp-rdma-cm-363gbps.txt").read_text()
    (tmp_path / "bin").mkdir(parents=True, exist_ok=True)
    (tmp_path / "perftest-output.txt").write_text(output)
    fake = tmp_path / "bin" / "ib_write_bw"
    fake.write_text(f"#!/bin/sh\ncat {tmp_path / 'perftest-output.txt'}\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    findings = _check(tmp_path)
    finding = findings["mlx5_0:1"][0]
    assert finding.evidence["engine"] == "perftest" and finding.evidence["bandwidth_gbps"] == 363.5
    assert finding.status.value == "pass"


def test_no_probe_skips_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _scenario(tmp_path, monkeypatch, rails=_healthy())
    findings = _check(tmp_path, no_probe=True)
    assert [(finding.status.value, finding.summary) for finding in findings["node"]] == [
        ("skip", "the NIC loopback was not run: --no-probe")]
    assert os.environ["NETDOCTOR_PROBE_WORKER"] == str(FAKE_WORKER)
