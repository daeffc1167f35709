"""`netdoctor probe`: exit codes, outputs and usage errors, with recorded device results."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from netdoctor.errors import UsageError
from netdoctor.probe import command
from netdoctor.probe.command import parse_gpu_list, probe_command

DEVICE = Path(__file__).parent / "data" / "device" / "nvidia-h200-x2"


def recorded(name: str) -> dict[str, Any]:
    return json.loads((DEVICE / name).read_text(encoding="utf-8"))["probe"]


def fake_probe(result: dict[str, Any], calls: list[dict[str, Any]]) -> Any:
    def run(**kwargs: Any) -> dict[str, Any]:
        calls.append(kwargs)
        return result
    return run


@pytest.mark.parametrize(("name", "code", "grade"), [("probe-report.json", 0, "pass"),
                                                     ("probe-report-p2p-disabled.json", 2, "fail")])
def test_json_report_and_exit_code(name: str, code: int, grade: str, monkeypatch: pytest.MonkeyPatch,
                                   tmp_path: Path) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(command, "run_probe", fake_probe(recorded(name), calls))
    output = tmp_path / "report.json"
    assert probe_command("0,1", "auto", 5.0, "json", output, None, None) == code
    assert calls == [{"gpus": [0, 1], "engine": "auto", "budget_s": 5.0}]
    report = json.loads(output.read_text())
    assert report["schema"] == "netdoctor.report/1"
    assert report["grade"] == grade
    assert [finding["check"] for finding in report["findings"]] == ["nccl-probe"]
    assert report["probe"]["busbw_gbps"] == recorded(name)["busbw_gbps"]


def test_text_output(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(command, "run_probe", fake_probe(recorded("probe-report-p2p-disabled.json"), []))
    assert probe_command(None, "auto", 5.0, "text", None, "dgx-h100", None) == 2
    text = capsys.readouterr().out
    assert ": FAIL" in text
    assert "transport SHM, 4 channel(s)" in text
    assert "1 GiB" in text and "[fail] node" in text


def test_timeout_result_fails(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    result = {"status": "timeout", "reason": "probe timed out: killed at the 1 s deadline", "gpus": [0, 1],
              "gpu_count": 2, "sizes": [], "transport": {}, "localisation": [], "duration_s": 1.2,
              "gpu_links": recorded("probe-report.json")["gpu_links"]}
    monkeypatch.setattr(command, "run_probe", fake_probe(result, []))
    assert probe_command(None, "auto", 1.0, "text", None, None, None) == 2
    assert "probe timed out" in capsys.readouterr().out


def test_usage_errors() -> None:
    assert parse_gpu_list(" 0, 2,3 ") == [0, 2, 3]
    assert parse_gpu_list(None) is None
    with pytest.raises(UsageError):
        parse_gpu_list("0,a")
    with pytest.raises(UsageError):
        parse_gpu_list("1,1")
    with pytest.raises(UsageError, match="live node"):
        probe_command(None, "auto", 5.0, "text", None, None, Path("/tmp/snap"))
    with pytest.raises(UsageError):
        probe_command(None, "mpi", 5.0, "text", None, None, None)


def test_worker_script_runs_alone_with_the_standard_library(tmp_path: Path) -> None:
    """The worker must start without netdoctor's dependencies; here (no driver) it skips."""
    result_path = tmp_path / "result.json"
    config = json.dumps({"sizes": [1 << 20], "budget_s": 5})
    worker = Path(command.__file__).with_name("worker.py")
    completed = subprocess.run([sys.executable, "-I", "-S", str(worker), config, str(result_path)],
                               capture_output=True, text=True, timeout=30, check=False)
    assert completed.returncode == 0, completed.stderr
    result = json.loads(result_path.read_text())
    assert result["status"] in ("skipped", "ok", "error")
    assert "worker_s" in result
