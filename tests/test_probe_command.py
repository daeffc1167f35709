"""`netdoctor probe`: the check pipeline with the probe checks alone; exit codes, outputs and
usage errors, with recorded device results standing in for the engine."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from netdoctor.cli import parse_gpu_list, run_cli
from netdoctor.errors import UsageError
from netdoctor.probe import dispatch, engine, nccl_worker
from netdoctor.probe.result import ProbeRequest, ProbeResult

DEVICE = Path(__file__).parent / "data" / "device" / "nvidia-h200-x2"
GPU_ADDRESSES = ("0000:00:06.0", "0000:00:07.0")      # where the recorded H200s sit


def recorded(name: str) -> dict[str, Any]:
    return json.loads((DEVICE / name).read_text(encoding="utf-8"))["probe"]


def fake_engine(result: dict[str, Any], calls: list[ProbeRequest], monkeypatch: pytest.MonkeyPatch) -> None:
    def run(request: ProbeRequest, *, node_gpus: tuple[int, ...] | None = None) -> ProbeResult:
        calls.append(request)
        return ProbeResult.from_json(result)
    monkeypatch.setattr(dispatch, "run_probe", run)


def gpu_sysfs(root: Path, *addresses: str, links: bool = True) -> Path:
    """A /sys tree with NVIDIA GPUs on the PCI bus (PCIe 5.0 x16 unless `links` is False)."""
    for address in addresses:
        device = root / "bus" / "pci" / "devices" / address
        device.mkdir(parents=True)
        (device / "vendor").write_text("0x10de\n")
        (device / "class").write_text("0x030200\n")
        (device / "device").write_text("0x9999\n")
        if links:
            for prefix in ("max", "current"):
                (device / f"{prefix}_link_speed").write_text("32.0 GT/s PCIe\n")
                (device / f"{prefix}_link_width").write_text("16\n")
    (root / "bus" / "pci" / "devices").mkdir(parents=True, exist_ok=True)
    return root


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This node, as discovery sees it: two GPUs on the PCI bus, no NVML (no driver here)."""
    root = gpu_sysfs(tmp_path / "sys", *GPU_ADDRESSES)
    monkeypatch.setenv("NETDOCTOR_SYSFS_ROOT", str(root))
    return root


def probe(*args: str) -> tuple[int, str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = run_cli(["probe", *args])
    return code, stdout.getvalue(), stderr.getvalue()


def report_of(*args: str) -> tuple[int, dict[str, Any]]:
    code, stdout, _ = probe("--format", "json", *args)
    return code, json.loads(stdout)


@pytest.mark.parametrize(("name", "code", "grade"), [("probe-report.json", 0, "pass"),
                                                     ("probe-report-p2p-disabled.json", 2, "fail")])
def test_json_report_and_exit_code(name: str, code: int, grade: str, node: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[ProbeRequest] = []
    fake_engine(recorded(name), calls, monkeypatch)
    assert report_of("--gpus", "0,1", "--budget", "5")[0] == code
    [request] = calls
    assert (request.gpus, request.engine, request.budget_s, request.pass_fraction) == ((0, 1), "auto", 5.0, 0.8)
    report = report_of("--gpus", "0,1", "--budget", "5")[1]
    assert report["schema"] == "netdoctor.report/1"
    assert report["grade"] == grade
    assert [finding["check"] for finding in report["findings"]] == ["nccl-probe"]
    # The report's `probe` section is the engine's result, key for key.
    assert report["probe"] == recorded(name)


def test_text_output(node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_engine(recorded("probe-report-p2p-disabled.json"), [], monkeypatch)
    code, text, _ = probe("--rules", "dgx-h100", "--budget", "5")
    assert code == 2
    assert ": FAIL" in text
    assert "transport SHM, 4 channel(s)" in text
    assert "1 GiB" in text and "[fail] node" in text


def test_timeout_result_fails(node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = {"status": "timeout", "reason": "probe timed out: killed at the 1 s deadline", "gpus": [0, 1],
              "gpu_count": 2, "sizes": [], "transport": {}, "localisation": [], "duration_s": 1.2,
              "gpu_links": recorded("probe-report.json")["gpu_links"]}
    fake_engine(result, [], monkeypatch)
    code, text, _ = probe("--budget", "1")
    assert code == 2 and "probe timed out" in text


def test_usage_errors() -> None:
    assert parse_gpu_list(" 0, 2,3 ") == (0, 2, 3)
    assert parse_gpu_list(None) is None
    with pytest.raises(UsageError):
        parse_gpu_list("0,a")
    with pytest.raises(UsageError):
        parse_gpu_list("1,1")
    code, _, stderr = probe("--snapshot", "/tmp/snap")
    assert code == 3 and "live node" in stderr
    code, _, stderr = probe("--engine", "mpi")
    assert code == 3 and "--engine 'mpi': choose auto, nccl, nccl-tests" in stderr


def test_worker_script_runs_alone_with_the_standard_library(tmp_path: Path) -> None:
    """The worker must start without netdoctor's dependencies; here (no driver) it skips."""
    result_path = tmp_path / "result.json"
    config = json.dumps({"sizes": [1 << 20], "budget_s": 5})
    completed = subprocess.run([sys.executable, "-I", "-S", str(nccl_worker.WORKER), config, str(result_path)],
                               capture_output=True, text=True, timeout=30, check=False)
    assert completed.returncode == 0, completed.stderr
    result = json.loads(result_path.read_text())
    assert result["status"] in ("skipped", "ok", "error")
    assert "worker_s" in result


def test_a_check_plugin_that_fails_to_load_is_reported(node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not lost on the way (it used to surface as "unknown check id nccl-probe")."""
    from netdoctor.checks.registry import Registry
    from netdoctor.errors import PluginError

    def broken(self: Registry, package: str = "") -> None:
        raise PluginError("built-in check module netdoctor_plugins.mtu cannot be imported: SyntaxError")

    monkeypatch.setattr(Registry, "load_builtins", broken)
    fake_engine(recorded("probe-report.json"), [], monkeypatch)
    code, _, stderr = probe("--format", "json")
    assert code == 3 and "netdoctor_plugins.mtu cannot be imported" in stderr


def test_host_is_the_short_name_as_in_check(node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    monkeypatch.setattr(socket, "gethostname", lambda: "gpu-node-07.cluster.example.org")
    fake_engine(recorded("probe-report.json"), [], monkeypatch)
    assert report_of()[1]["host"] == "gpu-node-07"


def test_localisation_fraction_is_the_explicit_packs_pass_fraction(node: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    pack = tmp_path / "strict.toml"
    pack.write_text('[pack]\nname = "strict"\nextends = "default"\n\n[nccl-probe]\npass_fraction = 0.95\n')
    calls: list[ProbeRequest] = []
    fake_engine(recorded("probe-report.json"), calls, monkeypatch)
    report_of("--rules", str(pack))
    assert calls[0].pass_fraction == 0.95


# -- without NVML the inventory's GPUs (from the PCI bus) are graded, not skipped --------------

def _without_nvml(name: str = "probe-report.json", **changes: Any) -> dict[str, Any]:
    """A device result as the engine returns it when pynvml cannot be imported: no gpu_links."""
    result = json.loads(json.dumps(recorded(name)))
    result["gpu_links"] = []
    result.update(changes)
    return result


def test_without_nvml_a_measured_result_is_graded_against_the_pcie_link(node: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    fake_engine(_without_nvml(), [], monkeypatch)
    code, report = report_of()
    assert code == 0, report["findings"]
    [finding] = report["findings"]
    assert finding["status"] == "pass" and "no NVIDIA GPUs" not in finding["summary"]
    assert finding["evidence"]["interconnect"] == "PCIe"
    # 1 % of the NVLink level, over NET/Socket: graded (fail), never "no NVIDIA GPUs".
    slow = _without_nvml()
    slow["sizes"][-1]["busbw_gbps"] = 3.3
    slow["transport"] = {"kind": "NET/Socket", "channels": 2}
    fake_engine(slow, [], monkeypatch)
    code, report = report_of()
    assert code == 2 and report["findings"][0]["status"] == "fail"


def test_without_nvml_or_link_facts_a_measurement_is_unknown_not_a_skip(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NETDOCTOR_SYSFS_ROOT", str(gpu_sysfs(tmp_path / "sys", *GPU_ADDRESSES, links=False)))
    fake_engine(_without_nvml(), [], monkeypatch)
    code, report = report_of()
    assert code == 3
    assert report["grade"] == "unknown" and report["findings"][0]["status"] == "unknown"
    assert "326.4 GB/s" in report["findings"][0]["summary"]
    assert report["checks"][0]["required"] is True


@pytest.mark.parametrize(("result", "code", "text"), [
    ({"status": "error", "reason": "NCCL ncclCommInitAll failed: unhandled cuda error (ncclResult 1)",
      "reason_code": "nccl", "gpus": [0, 1], "gpu_count": 2}, 3, "ncclCommInitAll failed"),
    ({"status": "timeout", "reason_code": "timeout", "gpus": [0, 1], "gpu_count": 2,
      "reason": "probe timed out: killed at the 5 s deadline after NCCL init, during the all-reduces"}, 2,
     "probe timed out"),
    # Killed in cuInit: unknown, never "no NVIDIA GPUs".
    ({"status": "timeout", "reason_code": "init-timeout", "gpus": [], "gpu_count": 0,
      "reason": "timeout during NCCL init: killed at the 5 s deadline before NCCL init finished"}, 3,
     "timeout during NCCL init"),
    ({"status": "skipped", "reason": "all_reduce_perf (nccl-tests) is not installed", "reason_code": "no-nccl-tests",
      "gpus": [], "gpu_count": 0}, 3, "all_reduce_perf"),
])
def test_without_nvml_failures_are_not_a_pass(result: dict[str, Any], code: int, text: str, node: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    result = {"sizes": [], "transport": {}, "localisation": [], "gpu_links": [], "duration_s": 1.0, **result}
    fake_engine(result, [], monkeypatch)
    status, report = report_of()
    assert status == code
    [finding] = report["findings"]
    assert finding["status"] == {2: "fail", 3: "unknown"}[code]
    assert text in finding["summary"]


def test_a_gpu_less_node_is_still_a_skip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NETDOCTOR_SYSFS_ROOT", str(gpu_sysfs(tmp_path / "sys")))
    calls: list[ProbeRequest] = []
    fake_engine(recorded("probe-report.json"), calls, monkeypatch)
    code, report = report_of()
    assert code == 0 and report["findings"][0]["status"] == "skip"
    assert calls == []                     # nothing to probe: the engine is not started


@pytest.mark.parametrize("options", [(), ("--gpus", "0,1"), ("--engine", "nccl-tests"), ("--engine", "nccl")])
def test_one_rule_for_a_gpu_less_node_whatever_the_options(options: tuple[str, ...], tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPUs: the probe does not apply, skip and exit 0, also when GPUs or an engine are named
    (0.1 said pass without options and unknown, exit 3, with them)."""
    monkeypatch.setenv("NETDOCTOR_SYSFS_ROOT", str(gpu_sysfs(tmp_path / "sys")))
    calls: list[ProbeRequest] = []
    fake_engine(recorded("probe-report.json"), calls, monkeypatch)
    code, report = report_of(*options)
    assert code == 0 and [finding["status"] for finding in report["findings"]] == ["skip"]
    assert "no NVIDIA GPUs" in report["findings"][0]["summary"] and calls == []


def test_snapshot_is_not_offered_by_probe() -> None:
    from typer.testing import CliRunner

    from netdoctor.cli import app

    assert "--snapshot" not in CliRunner().invoke(app, ["probe", "--help"]).output


@pytest.mark.parametrize(("code", "reason"), [("no-driver", "no NVIDIA driver (libcuda.so.1 cannot be loaded)"),
                                              ("no-gpus", "no CUDA-capable GPU visible")])
def test_gpus_on_the_bus_that_cuda_cannot_open_are_unknown(code: str, reason: str, node: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Two GPUs on the PCI bus, NVML and CUDA blind (no driver, CUDA_VISIBLE_DEVICES=""): nothing
    was measured on a node that has GPUs, exit 3 (a skip, exit 0, passed such a node in a prolog)."""
    result = {"status": "skipped", "reason_code": code, "gpus": [], "gpu_count": 0, "sizes": [],
              "reason": reason, "gpu_links": [], "transport": {}}
    fake_engine(result, [], monkeypatch)
    status, report = report_of()
    [finding] = report["findings"]
    assert status == 3 and finding["status"] == "unknown"
    assert finding["summary"] == f"2 NVIDIA GPU(s) on this node, but CUDA cannot use them: {reason}"
    assert "modprobe nvidia" in finding["remedy"]


def test_one_gpu_is_still_a_skip(node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = {"status": "skipped", "reason_code": "single-gpu", "gpus": [0], "gpu_count": 1, "sizes": [],
              "reason": "1 GPU(s) selected: an all-reduce needs at least 2", "gpu_links": [], "transport": {}}
    fake_engine(result, [], monkeypatch)
    status, report = report_of()
    assert status == 0 and report["findings"][0]["status"] == "skip"


# -- through the real engine and a fake worker: the budget and the worker's phase -------------

def test_a_budget_too_short_is_unknown(node: Path) -> None:
    code, text, _ = probe("--budget", "1.3")
    assert code == 3
    assert ": UNKNOWN" in text
    assert "[unknown] node: the probe needs at least 3 s; it got 1.3 s: raise --deadline/--budget" in text
    code, text, _ = probe("--gpus", "0,1", "--budget", "1.3")
    assert code == 3 and "[unknown] node: the probe needs at least 3 s; it got 1.3 s" in text


@pytest.mark.parametrize(("init_done", "code", "text"), [(False, 3, "[unknown] node: timeout during NCCL init"),
                                                         (True, 2, "[fail] node: probe timed out")])
def test_a_kill_during_init_is_unknown_and_after_init_fails(init_done: bool, code: int, text: str, tmp_path: Path,
                                                           node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_probe_engine import _phase_worker

    monkeypatch.setattr(nccl_worker, "WORKER", _phase_worker(tmp_path / "worker.py", init_done=init_done,
                                                             started=tmp_path / "started"))
    status, output, _ = probe("--budget", f"{engine.MIN_PROBE_BUDGET_S:g}")
    assert status == code
    assert text in output


# -- --gpus: a selection that cannot be probed is a usage error (exit 3, one line) -----------

def test_gpu_selection_errors_are_usage_errors(node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[ProbeRequest] = []
    bad = {"status": "error", "reason_code": "bad-gpus", "reason": "GPU index [5] does not exist: 2 GPU(s) visible",
           "gpus": [], "gpu_count": 0, "sizes": [], "gpu_links": [], "transport": {}}
    fake_engine(bad, calls, monkeypatch)
    for argv, message in ((["--gpus", "5"], "--gpus '5': an all-reduce needs at least 2 GPUs"),
                          (["--gpus", "bogus"], "--gpus 'bogus': expected comma-separated GPU indices"),
                          (["--gpus", "0,5"], "--gpus '0,5': GPU index [5] does not exist: 2 GPU(s) visible")):
        code, _, stderr = probe(*argv)
        lines = stderr.splitlines()
        assert code == 3
        assert len(lines) == 1 and lines[0].startswith("netdoctor: error: ") and message in lines[0], lines
    assert len(calls) == 1          # `5` and `bogus` were refused before the probe ran


def test_the_report_probe_section_round_trips_the_typed_result() -> None:
    """The JSON `probe` section keeps the engines' exact shape through the typed result."""
    for name in ("probe-report.json", "probe-report-p2p-disabled.json"):
        section = recorded(name)
        assert ProbeResult.from_json(section).to_json() == section
        assert list(ProbeResult.from_json(section).to_json()) == list(section)
