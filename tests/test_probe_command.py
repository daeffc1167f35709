"""`netdoctor probe`: exit codes, outputs and usage errors, with recorded device results."""

from __future__ import annotations

import contextlib
import io
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
    assert calls == [{"gpus": [0, 1], "engine": "auto", "budget_s": 5.0, "localise_below_fraction": 0.8}]
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


def test_a_check_plugin_that_fails_to_load_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not lost in the loader thread (it used to surface as "unknown check id nccl-probe")."""
    from netdoctor.checks.registry import Registry
    from netdoctor.errors import PluginError

    def broken(self: Registry, package: str = "") -> None:
        raise PluginError("built-in check module netdoctor_plugins.mtu cannot be imported: SyntaxError")

    monkeypatch.setattr(Registry, "load_builtins", broken)
    monkeypatch.setattr(command, "run_probe", fake_probe(recorded("probe-report.json"), []))
    with pytest.raises(PluginError, match="netdoctor_plugins.mtu cannot be imported"):
        probe_command(None, "auto", 5.0, "json", None, None, None)


def test_host_is_the_short_name_as_in_check(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(command.socket, "gethostname", lambda: "gpu-node-07.cluster.example.org")
    monkeypatch.setattr(command, "run_probe", fake_probe(recorded("probe-report.json"), []))
    output = tmp_path / "report.json"
    probe_command(None, "auto", 5.0, "json", output, None, None)
    assert json.loads(output.read_text())["host"] == "gpu-node-07"


def test_localisation_fraction_is_the_explicit_packs_pass_fraction(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    pack = tmp_path / "strict.toml"
    pack.write_text('[pack]\nname = "strict"\nextends = "default"\n\n[nccl-probe]\npass_fraction = 0.95\n')
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(command, "run_probe", fake_probe(recorded("probe-report.json"), calls))
    probe_command(None, "auto", 5.0, "json", tmp_path / "report.json", str(pack), None)
    assert calls[0]["localise_below_fraction"] == 0.95


# -- without NVML the probe's own GPUs are graded, not skipped as a GPU-less node ------------

def _without_nvml(name: str = "probe-report.json", **changes: Any) -> dict[str, Any]:
    """A device result as run_probe returns it when pynvml cannot be imported: no gpu_links."""
    result = json.loads(json.dumps(recorded(name)))
    result["gpu_links"] = []
    result.update(changes)
    return result


def _sysfs(root: Path, *addresses: str, speed: str = "32.0 GT/s PCIe", width: str = "16") -> Path:
    for address in addresses:
        device = root / "bus" / "pci" / "devices" / address
        device.mkdir(parents=True)
        for prefix in ("max", "current"):
            (device / f"{prefix}_link_speed").write_text(speed + "\n")
            (device / f"{prefix}_link_width").write_text(width + "\n")
    return root


def _report(output: Path) -> dict[str, Any]:
    return json.loads(output.read_text())


def test_without_nvml_a_measured_result_is_graded_against_the_pcie_link(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    monkeypatch.setattr(command, "SYSFS", _sysfs(tmp_path / "sys", "0000:00:06.0", "0000:00:07.0"))
    monkeypatch.setattr(command, "run_probe", fake_probe(_without_nvml(), []))
    output = tmp_path / "healthy.json"
    assert probe_command(None, "auto", 5.0, "json", output, None, None) == 0
    [finding] = _report(output)["findings"]
    assert finding["status"] == "pass" and "no NVIDIA GPUs" not in finding["summary"]
    assert finding["evidence"]["interconnect"] == "PCIe"
    # 1 % of the NVLink level, over NET/Socket: graded (fail), never "no NVIDIA GPUs".
    slow = _without_nvml()
    slow["sizes"][-1]["busbw_gbps"] = 3.3
    slow["transport"] = {"kind": "NET/Socket", "channels": 2}
    monkeypatch.setattr(command, "run_probe", fake_probe(slow, []))
    assert probe_command(None, "auto", 5.0, "json", tmp_path / "slow.json", None, None) == 2
    assert _report(tmp_path / "slow.json")["findings"][0]["status"] == "fail"


def test_without_nvml_or_link_facts_a_measurement_is_unknown_not_a_skip(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    monkeypatch.setattr(command, "SYSFS", tmp_path / "empty")
    monkeypatch.setattr(command, "run_probe", fake_probe(_without_nvml(), []))
    output = tmp_path / "report.json"
    assert probe_command(None, "auto", 5.0, "json", output, None, None) == 3
    report = _report(output)
    assert report["grade"] == "unknown" and report["findings"][0]["status"] == "unknown"
    assert "326.4 GB/s" in report["findings"][0]["summary"]
    assert report["checks"][0]["required"] is True


@pytest.mark.parametrize(("result", "code", "text"), [
    ({"status": "error", "reason": "NCCL ncclCommInitAll failed: unhandled cuda error (ncclResult 1)",
      "reason_code": "nccl", "gpus": [0, 1], "gpu_count": 2}, 3, "ncclCommInitAll failed"),
    ({"status": "timeout", "reason_code": "timeout", "gpus": [0, 1], "gpu_count": 2,
      "reason": "probe timed out: killed at the 5 s deadline after NCCL init, during the all-reduces"}, 2,
     "probe timed out"),
    # Nothing named any GPU (killed in cuInit): unknown, never "no NVIDIA GPUs".
    ({"status": "timeout", "reason_code": "init-timeout", "gpus": [], "gpu_count": 0,
      "reason": "timeout during NCCL init: killed at the 5 s deadline before NCCL init finished"}, 3,
     "timeout during NCCL init"),
    ({"status": "skipped", "reason": "all_reduce_perf (nccl-tests) is not installed", "reason_code": "no-nccl-tests",
      "gpus": [], "gpu_count": 0}, 3, "all_reduce_perf"),
])
def test_without_nvml_failures_are_not_a_pass(result: dict[str, Any], code: int, text: str,
                                              monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    result = {"sizes": [], "transport": {}, "localisation": [], "gpu_links": [], "duration_s": 1.0, **result}
    monkeypatch.setattr(command, "run_probe", fake_probe(result, []))
    output = tmp_path / "report.json"
    assert probe_command(None, "auto", 5.0, "json", output, None, None) == code
    [finding] = _report(output)["findings"]
    assert finding["status"] == {2: "fail", 3: "unknown"}[code]
    assert text in finding["summary"]


def test_a_gpu_less_node_is_still_a_skip(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    result = {"status": "skipped", "reason_code": "no-driver", "gpus": [], "gpu_count": 0, "sizes": [],
              "reason": "no NVIDIA driver (libcuda.so.1 cannot be loaded)", "gpu_links": [], "transport": {}}
    monkeypatch.setattr(command, "run_probe", fake_probe(result, []))
    assert probe_command(None, "auto", 5.0, "json", tmp_path / "report.json", None, None) == 0
    assert _report(tmp_path / "report.json")["findings"][0]["status"] == "skip"


# -- through the real engine and a fake worker: the budget and the worker's phase -------------

def test_a_budget_too_short_is_unknown(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert probe_command(None, "auto", 1.3, "text", None, None, None) == 3
    text = capsys.readouterr().out
    assert ": UNKNOWN" in text
    assert "[unknown] node: nvml was not run: the probe needs at least 3 s; it got 1.3 s: raise --deadline/--budget" in text
    # With --gpus the GPUs are known, and the check itself says it.
    assert probe_command("0,1", "auto", 1.3, "text", None, None, None) == 3
    assert "[unknown] node: the probe needs at least 3 s; it got 1.3 s" in capsys.readouterr().out


@pytest.mark.parametrize(("init_done", "code", "text"), [(False, 3, "[unknown] node: timeout during NCCL init"),
                                                         (True, 2, "[fail] node: probe timed out")])
def test_a_kill_during_init_is_unknown_and_after_init_fails(init_done: bool, code: int, text: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from netdoctor.probe import engine
    from tests.test_probe_engine import _phase_worker

    monkeypatch.setattr(engine, "WORKER", _phase_worker(tmp_path / "worker.py", init_done=init_done,
                                                        started=tmp_path / "started"))
    monkeypatch.setattr(engine, "collect_gpu_links", lambda indices: [])        # pynvml not importable
    assert probe_command(None, "auto", engine.MIN_PROBE_BUDGET_S, "text", None, None, None) == code
    assert text in capsys.readouterr().out


# -- --gpus: a selection that cannot be probed is a usage error (exit 3, one line) -----------

def test_gpu_selection_errors_are_usage_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    from netdoctor.cli import run_cli

    calls: list[dict[str, Any]] = []
    bad = {"status": "error", "reason_code": "bad-gpus", "reason": "GPU index [5] does not exist: 2 GPU(s) visible",
           "gpus": [], "gpu_count": 0, "sizes": [], "gpu_links": [], "transport": {}}
    monkeypatch.setattr(command, "run_probe", fake_probe(bad, calls))
    with pytest.raises(UsageError, match=r"--gpus '0,5': GPU index \[5\] does not exist"):
        probe_command("0,5", "auto", 5.0, "text", None, None, None)
    for argv, message in ((["probe", "--gpus", "5"], "--gpus '5': an all-reduce needs at least 2 GPUs"),
                          (["probe", "--gpus", "bogus"], "--gpus 'bogus': expected comma-separated GPU indices"),
                          (["probe", "--gpus", "0,5"], "GPU index [5] does not exist: 2 GPU(s) visible")):
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            assert run_cli(argv) == 3
        lines = stderr.getvalue().splitlines()
        assert len(lines) == 1 and lines[0].startswith("netdoctor: error: ") and message in lines[0], lines
    assert len(calls) == 2          # `5` and `bogus` were refused before the probe ran
