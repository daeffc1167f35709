"""As root, netdoctor trusts only what root alone can change: rule packs and tool directories.

Tests run as root; "another user" is a file or directory owned by `nobody`, or one that
group/other may write.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from netdoctor.host.runner import run_commands
from netdoctor.host.trust import SAFE_SEARCH_PATH, tool_search_path
from netdoctor.host.types import CommandSpec, CommandState

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "nodes" / "dgx-h100-port-down"
NOBODY = 65534
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="root's trust rules apply to root runs")

# A pack that would turn a port-down node into a pass: every check in shadow mode.
SHADOW_ALL = """[grade]
shadow = ["port-state", "link-speed", "pcie-link", "error-counters", "mtu", "pfc-ecn", "gpudirect",
          "gpu-nic-affinity", "nccl-probe", "gpu-driver"]
"""


def _check(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "netdoctor", "check", "--no-probe", "--snapshot", str(FIXTURE)],
                          capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, "NO_COLOR": "1", **env})


@pytest.fixture()
def private(tmp_path: Path) -> Path:
    directory = tmp_path / "private"
    directory.mkdir(mode=0o755)
    return directory


def test_a_trusted_site_pack_is_applied(private: Path) -> None:
    site = private / "rules.toml"
    site.write_text(SHADOW_ALL)
    site.chmod(0o644)
    done = _check({"NETDOCTOR_RULES": str(site)})
    assert done.returncode == 0, done.stderr          # shadowed: reported, not graded


@pytest.mark.parametrize("how", ["world-writable file", "owned by another user", "in a directory others can write"])
def test_a_site_pack_another_user_can_change_is_refused(private: Path, how: str) -> None:
    site = private / "rules.toml"
    site.write_text(SHADOW_ALL)
    if how == "world-writable file":
        site.chmod(0o666)
    elif how == "owned by another user":
        os.chown(site, NOBODY, NOBODY)
    else:
        private.chmod(0o777)
    done = _check({"NETDOCTOR_RULES": str(site)})
    assert done.returncode == 3, done.stdout
    assert "not trusted when running as root" in done.stderr and "Traceback" not in done.stderr


def test_root_never_searches_relative_empty_or_shared_directories(private: Path, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    os.chown(foreign, NOBODY, NOBODY)
    tool_search_path.cache_clear()
    path = os.pathsep.join(["", "bin", str(shared), str(foreign), str(private), "/usr/bin"])
    assert tool_search_path(path) == os.pathsep.join([str(private), "/usr/bin"])
    assert tool_search_path(os.pathsep.join(["", str(shared)])) == os.pathsep.join(SAFE_SEARCH_PATH)


def _fake_ibstat(directory: Path) -> None:
    tool = directory / "ibstat"
    tool.write_text("#!/bin/sh\necho planted\n")
    tool.chmod(0o755)


def test_a_tool_planted_in_the_current_directory_or_a_shared_one_is_not_run(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    _fake_ibstat(shared)
    _fake_ibstat(tmp_path)
    monkeypatch.chdir(tmp_path)
    tool_search_path.cache_clear()
    spec = CommandSpec("ibstat", ("ibstat",), timeout_s=5.0)
    result = run_commands([spec], path=os.pathsep.join(["", str(shared)]))["ibstat"]
    assert "planted" not in result.stdout
    assert result.state in (CommandState.MISSING, CommandState.OK, CommandState.ERROR)


def test_a_tool_in_a_root_owned_directory_still_runs(private: Path) -> None:
    _fake_ibstat(private)
    tool_search_path.cache_clear()
    spec = CommandSpec("ibstat", ("ibstat",), timeout_s=5.0)
    result = run_commands([spec], path=str(private))["ibstat"]
    assert result.state is CommandState.OK and result.stdout.strip() == "planted"
