"""On a live node with GPUs the all-reduce's worker starts before discovery and runs beside it;
discovery's facts reach it on stdin, and a probe the run no longer wants is stopped."""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
import textwrap
import time
from pathlib import Path

import pytest

from netdoctor.cli import run_cli
from netdoctor.probe import nccl_worker, worker
from netdoctor.probe.result import LaterFacts
from tests.test_probe_command import GPU_ADDRESSES, gpu_sysfs

SLOW_TOOL_S = 1.0

# Records when it started and the line it got on stdin, then answers like the real worker.
FAKE_WORKER = textwrap.dedent("""
    import json, os, select, sys, time
    config, result_path = json.loads(sys.argv[1]), sys.argv[2]
    marks = {"started": time.monotonic(), "started_at": time.time(), "pid": os.getpid(), "config": config}
    with open(os.environ["NETDOCTOR_TEST_MARKS"], "w") as handle:
        json.dump(marks, handle)
    if os.environ.get("NETDOCTOR_TEST_HANG"):
        time.sleep(30)
    line = b""
    if config["localise_below_gbps"] == "stdin":
        ready, _, _ = select.select([0], [], [], 10)
        line = os.read(0, 4096) if ready else b""
    marks["line"] = line.decode()
    with open(os.environ["NETDOCTOR_TEST_MARKS"], "w") as handle:
        json.dump(marks, handle)
    size = 1 << 30
    json.dump({"status": "ok", "reason": "", "gpus": [0, 1], "gpu_count": 2, "timings": {"measured": 0.5},
               "sizes": [{"bytes": size, "count": size // 4, "iterations": 10, "warmup": 2, "time_us": 4000.0,
                          "algbw_gbps": 268.4, "busbw_gbps": 268.4, "verified": True, "wrong_elements": 0}]},
              open(result_path, "w"))
""")


def _executable(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def live(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two GPUs bound to the nvidia driver, a worker stand-in, and an nvidia-smi that takes a second."""
    root = gpu_sysfs(tmp_path / "sys", *GPU_ADDRESSES)
    (root / "bus" / "pci" / "drivers" / "nvidia").mkdir(parents=True)
    for address in GPU_ADDRESSES:
        (root / "bus" / "pci" / "devices" / address / "driver").symlink_to("../../../bus/pci/drivers/nvidia")
    monkeypatch.setenv("NETDOCTOR_SYSFS_ROOT", str(root))
    monkeypatch.setattr(nccl_worker, "WORKER", _executable(tmp_path / "worker.py", FAKE_WORKER))
    tools = tmp_path / "bin"
    tools.mkdir()
    _executable(tools / "nvidia-smi", f"#!/bin/sh\nsleep {SLOW_TOOL_S}\ndate +%s.%N > {tmp_path}/smi-end\n")
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("NETDOCTOR_TEST_MARKS", str(tmp_path / "marks.json"))
    return tmp_path


def _probe(*args: str) -> tuple[int, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = run_cli(["probe", "--format", "json", *args])
    return code, stdout.getvalue() + stderr.getvalue()


def test_the_worker_starts_before_discovery_and_gets_its_threshold_on_stdin(live: Path) -> None:
    started = time.monotonic()
    code, output = _probe()
    elapsed = time.monotonic() - started
    marks = json.loads((live / "marks.json").read_text(encoding="utf-8"))
    assert code == 0, output
    # The worker was up while discovery's nvidia-smi still ran.
    assert marks["started"] - started < SLOW_TOOL_S * 0.8
    assert marks["started_at"] < float((live / "smi-end").read_text())
    assert marks["config"]["localise_below_gbps"] == nccl_worker.THRESHOLD_ON_STDIN == worker.THRESHOLD_ON_STDIN
    # Without NVML there is no expectation to localise below; the line says so once discovery is done.
    assert json.loads(marks["line"]) == {"localise_below_gbps": None}
    report = json.loads(output[:output.rindex("}") + 1])
    assert report["probe"]["busbw_gbps"] == 268.4
    assert "exited" in report["probe"]["timings"]
    assert elapsed < 30


def test_netdoctor_probe_starts_the_worker_before_the_checks_are_loaded(live: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """`netdoctor probe`: the worker is most of the command's time, so it starts as soon as the
    command line is read, before the plugins (and the inventory model they import) load."""
    from netdoctor import run

    seen: list[bool] = []
    load_plugins = run._load_plugins

    def loading(*args: object, **kwargs: object) -> object:
        for _ in range(100):        # the worker writes its marks first thing
            if (live / "marks.json").exists():
                break
            time.sleep(0.05)
        seen.append((live / "marks.json").exists())
        return load_plugins(*args, **kwargs)

    monkeypatch.setattr(run, "_load_plugins", loading)
    code, output = _probe()
    assert code == 0, output
    assert seen == [True]


def test_a_probe_the_run_no_longer_wants_is_stopped(live: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NETDOCTOR_TEST_HANG", "1")
    code, output = _probe("--rules", "no-such-pack")         # a usage error found after discovery
    assert code == 3, output
    pid = json.loads((live / "marks.json").read_text(encoding="utf-8"))["pid"]
    for _ in range(100):
        try:
            if "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]:
                break
        except OSError:          # gone (ENOENT, or ESRCH while it was being reaped)
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the early worker {pid} still runs after the run ended")


@pytest.mark.parametrize("args", [("--engine", "nccl-tests"), ("--budget", "2")])
def test_no_early_start_for_an_engine_that_needs_discovery_or_a_refused_budget(live: Path, args: tuple[str, ...]) -> None:
    _probe(*args)
    assert not (live / "marks.json").exists()


def test_later_facts_are_set_once() -> None:
    facts = LaterFacts()
    assert facts.wait(0.01) is False
    facts.resolve((), 0.9)
    facts.cancel()
    assert facts.wait(0) == ((), 0.9)
    cancelled = LaterFacts()
    cancelled.cancel()
    cancelled.resolve((), 0.9)
    assert cancelled.wait(0) is None


@pytest.mark.parametrize("command, at_rest", [("check", True), ("probe", False)])
def test_nvml_is_read_once_and_before_the_worker_opens_the_gpus_where_checks_judge_them_at_rest(
        live: Path, monkeypatch: pytest.MonkeyPatch, command: str, at_rest: bool) -> None:
    """`check` judges the GPUs at rest (idle clocks, utilisation): NVML is read before the early
    worker starts, and discovery takes the same reading. `netdoctor probe` judges only the
    traffic: its worker starts at once, beside NVML."""
    from netdoctor.host.live import LiveSource

    reads: list[float] = []

    def slow_nvml(self: LiveSource) -> tuple[None, str]:
        if self._nvml is None:
            time.sleep(0.5)
            reads.append(time.time())
            self._nvml = (None, "no NVIDIA driver: NVML Shared Library Not Found")
        return self._nvml

    monkeypatch.setattr(LiveSource, "_nvml_once", slow_nvml)
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        run_cli([command, "--format", "json"])
    marks = json.loads((live / "marks.json").read_text(encoding="utf-8"))
    assert len(reads) == 1
    assert (marks["started_at"] >= reads[0]) is at_rest


def test_a_process_group_started_after_the_exit_kill_dies_at_once() -> None:
    """The early probe's thread is not waited for: a worker it starts after netdoctor's exit
    handler killed the groups must not outlive netdoctor."""
    import subprocess

    from netdoctor.host.runner import _ProcessGroups

    groups = _ProcessGroups()
    groups.kill()
    late = subprocess.Popen(["sleep", "30"], start_new_session=True)
    groups.add(late.pid)
    assert late.wait(timeout=5) == -9
