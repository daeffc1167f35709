"""Packaging: the zipapp in a clean venv, the .deb built and unpacked, systemd units, RPM spec."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGING = REPO / "packaging"
FIXTURES = REPO / "tests" / "fixtures" / "nodes"

needs_fixtures = pytest.mark.skipif(not (FIXTURES / "dgx-h100").is_dir(), reason="node fixtures not generated")


@pytest.fixture(scope="module")
def zipapp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("zipapp") / "netdoctor.pyz"
    subprocess.run([sys.executable, str(PACKAGING / "build-zipapp.py"), "-o", str(output)], check=True,
                   capture_output=True, text=True, timeout=120)
    return output


@pytest.fixture(scope="module")
def clean_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv without site packages or pip: nothing but the standard library."""
    venv = tmp_path_factory.mktemp("venv") / "clean"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import importlib.util as u; print(u.find_spec('typer'), u.find_spec('psutil'))"],
                           capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == "None None"
    return python


def run_zipapp(python: Path, archive: Path, cache: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    env["NETDOCTOR_PYZ_CACHE"] = str(cache)
    return subprocess.run([str(python), str(archive), *arguments], capture_output=True, text=True, timeout=120,
                          env=env, cwd=cache.parent)


def test_zipapp_holds_only_pure_python(zipapp: Path) -> None:
    names = zipfile.ZipFile(zipapp).namelist()
    assert "__main__.py" in names and "_netdoctor_pyz.py" in names
    # tomli: Python 3.10 has no tomllib (its compiled build's .so files stay out, its .py files run).
    for package in ("netdoctor/cli.py", "netdoctor/fleet/cli.py", "netdoctor_plugins/", "netdoctor_rules/dgx-h100.toml",
                    "typer/", "click/", "structlog/", "ClusterShell/NodeSet.py", "pynvml.py", "tomli/_parser.py"):
        assert any(name.startswith(package) for name in names), package
    assert not [name for name in names if name.endswith((".so", ".pyd"))]
    # psutil is compiled; pydantic (newer typer) too; rich is not needed (plain help).
    assert not [name for name in names if name.startswith(("psutil/", "pydantic", "rich/"))]
    assert zipapp.read_bytes().startswith(b"#!/usr/bin/env python3\n")


@needs_fixtures
def test_zipapp_checks_snapshots_in_a_clean_venv(zipapp: Path, clean_python: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    healthy = run_zipapp(clean_python, zipapp, cache, "check", "--snapshot", str(FIXTURES / "dgx-h100"),
                         "--no-probe", "--format", "json")
    assert healthy.returncode == 0, healthy.stderr
    report = json.loads(healthy.stdout)
    assert report["schema"] == "netdoctor.report/1" and report["grade"] == "pass"
    failing = run_zipapp(clean_python, zipapp, cache, "check", "--snapshot", str(FIXTURES / "dgx-h100-port-down"),
                         "--no-probe", "--format", "json")
    assert failing.returncode == 2, failing.stderr
    assert json.loads(failing.stdout)["grade"] == "fail"
    (tmp_path / "n1.json").write_text(healthy.stdout)
    (tmp_path / "n2.json").write_text(failing.stdout)
    fleet = run_zipapp(clean_python, zipapp, cache, "fleet", "report", str(tmp_path / "n1.json"),
                       str(tmp_path / "n2.json"), "--format", "json")
    assert fleet.returncode == 2, fleet.stderr
    assert json.loads(fleet.stdout)["counts"]["fail"] == 1
    # Unpacked once, into a directory only its owner can write.
    unpacked = list(cache.glob("pyz-*"))
    assert len(unpacked) == 1 and (unpacked[0] / ".complete").exists()
    assert not unpacked[0].stat().st_mode & 0o022


def _build_id(archive: Path) -> str:
    main = zipfile.ZipFile(archive).read("__main__.py").decode()
    found = re.search(r'^BUILD_ID = "(\w+)"$', main, re.M)
    assert found, "no BUILD_ID in __main__.py"
    return found.group(1)


def _poisoned_package(directory: Path, marker: Path) -> None:
    """A netdoctor package that, if ever imported, leaves a marker file behind."""
    (directory / "netdoctor").mkdir(parents=True)
    (directory / "netdoctor" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (directory / ".complete").touch()


@pytest.mark.parametrize("case", ["target-other-owner", "target-group-writable", "target-incomplete",
                                  "root-other-owner", "root-world-writable"])
def test_zipapp_never_runs_code_from_an_untrusted_cache(zipapp: Path, clean_python: Path, tmp_path: Path, case: str) -> None:
    if "other-owner" in case and os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    cache = tmp_path / "cache"
    target = cache / f"pyz-{_build_id(zipapp)}"
    marker = tmp_path / "imported-from-untrusted-cache"
    _poisoned_package(target, marker)
    for directory in (cache, target):
        directory.chmod(0o755)
    if case == "target-other-owner":
        os.chown(target, 65534, 65534)
    elif case == "target-group-writable":
        target.chmod(0o775)
    elif case == "target-incomplete":
        (target / ".complete").unlink()
    elif case == "root-other-owner":
        os.chown(cache, 65534, 65534)      # target itself looks trusted: only the root check saves us
    elif case == "root-world-writable":
        cache.chmod(0o777)
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    env.update(NETDOCTOR_PYZ_CACHE=str(cache), TMPDIR=str(private_tmp))
    done = subprocess.run([str(clean_python), str(zipapp), "checks"], capture_output=True, text=True, timeout=120,
                          env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "port-state" in done.stdout
    assert not marker.exists(), f"imported netdoctor from {target}"
    assert "unpacking privately" in done.stderr
    # The untrusted directory is left alone, and the private copy is gone after the run.
    assert (target / "netdoctor" / "__init__.py").is_file()
    assert sorted(path.name for path in cache.iterdir()) == [target.name]
    assert list(private_tmp.iterdir()) == []


def test_zipapp_reuses_its_own_cache(zipapp: Path, clean_python: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    env["NETDOCTOR_PYZ_CACHE"] = str(cache)
    for _ in range(2):
        done = subprocess.run([str(clean_python), str(zipapp), "checks"], capture_output=True, text=True, timeout=120,
                              env=env, cwd=tmp_path)
        assert done.returncode == 0 and "port-state" in done.stdout, done.stderr
        assert "unpacking privately" not in done.stderr
    assert [path.name for path in cache.iterdir()] == [f"pyz-{_build_id(zipapp)}"]


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb is not installed")
def test_deb_installs_cli_rules_hooks_and_units(tmp_path: Path) -> None:
    built = subprocess.run([str(PACKAGING / "debian" / "build-deb.sh"), str(tmp_path / "out")], capture_output=True,
                           text=True, timeout=180, env={**os.environ, "PYTHON": sys.executable})
    assert built.returncode == 0, built.stderr
    package = Path(built.stdout.strip().splitlines()[-1])
    info = subprocess.run(["dpkg-deb", "-f", str(package), "Package", "Architecture", "Depends"], capture_output=True,
                          text=True, check=True).stdout
    assert "Package: netdoctor" in info and "Architecture: all" in info and "python3 (>= 3.10)" in info
    root = tmp_path / "root"
    subprocess.run(["dpkg", "-x", str(package), str(root)], check=True, timeout=60)
    expected_modes = {
        "usr/bin/netdoctor": 0o755,
        "usr/lib/netdoctor/netdoctor.pyz": 0o755,
        "usr/libexec/netdoctor/netdoctor-prolog": 0o755,
        "usr/libexec/netdoctor/netdoctor-healthcheck": 0o755,
        "usr/libexec/netdoctor/netdoctor-slurm-hook": 0o755,
        "usr/lib/systemd/system/netdoctor.service": 0o644,
        "usr/lib/systemd/system/netdoctor.timer": 0o644,
        "etc/netdoctor/slurm.conf": 0o644,
        "usr/share/netdoctor/rules/dgx-h100.toml": 0o644,
        "usr/share/netdoctor/systemd/netdoctor.service.d/strict.conf": 0o644,
    }
    for path, mode in expected_modes.items():
        assert (root / path).is_file(), path
        assert (root / path).stat().st_mode & 0o777 == mode, path
    assert "NETDOCTOR=/usr/bin/netdoctor\n" in (root / "etc/netdoctor/slurm.conf").read_text()
    conffiles = subprocess.run(["dpkg-deb", "--ctrl-tarfile", str(package)], capture_output=True, check=True).stdout
    assert b"./conffiles" in conffiles
    # The packaged zipapp runs with a plain interpreter.
    listing = subprocess.run([sys.executable, str(root / "usr/lib/netdoctor/netdoctor.pyz"), "checks"], capture_output=True,
                             text=True, timeout=120, env={**os.environ, "NETDOCTOR_PYZ_CACHE": str(tmp_path / "cache")})
    assert listing.returncode == 0, listing.stderr
    assert "port-state" in listing.stdout and "nccl-probe" in listing.stdout


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_units_verify(tmp_path: Path) -> None:
    service = (PACKAGING / "systemd" / "netdoctor.service").read_text()
    assert "SuccessExitStatus=0 1 2 3" in service
    assert "--no-probe --format prometheus" in service and "-o /var/lib/node_exporter/textfile_collector/netdoctor.prom" in service
    timer = (PACKAGING / "systemd" / "netdoctor.timer").read_text()
    assert "OnUnitActiveSec=5min" in timer and "RandomizedDelaySec=" in timer
    # /usr/bin/netdoctor is not installed here: point the copy at an executable that is.
    (tmp_path / "netdoctor.service").write_text(service.replace("/usr/bin/netdoctor", shutil.which("true") or "/bin/true"))
    (tmp_path / "netdoctor.timer").write_text(timer)
    done = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "netdoctor.service"), str(tmp_path / "netdoctor.timer")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr



@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_unit_is_hardened_and_the_strict_drop_in_verifies(tmp_path: Path) -> None:
    service = (PACKAGING / "systemd" / "netdoctor.service").read_text()
    for setting in ("SystemCallFilter=@system-service", "ProtectKernelTunables=yes", "ProtectKernelModules=yes",
                    "ProtectControlGroups=yes", "MemoryMax="):
        assert f"\n{setting}" in service, setting
    unit = tmp_path / "netdoctor.service"
    unit.write_text(service.replace("/usr/bin/netdoctor", shutil.which("true") or "/bin/true"))
    security = subprocess.run(["systemd-analyze", "security", "--offline=yes", str(unit)], capture_output=True,
                              text=True, timeout=60)
    exposure = float(re.search(r"Overall exposure level for netdoctor.service: ([0-9.]+)", security.stdout).group(1))
    assert exposure <= 3.0, security.stdout    # 0.1's unit: 4.6
    # The opt-in drop-in, next to the unit as systemd finds it: no directive it does not understand.
    (tmp_path / "netdoctor.service.d").mkdir()
    strict = PACKAGING / "systemd" / "netdoctor.service.d" / "strict.conf"
    (tmp_path / "netdoctor.service.d" / "strict.conf").write_text(strict.read_text())
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "strict.conf" not in done.stderr, done.stderr
    assert "DevicePolicy=closed" in strict.read_text() and "DeviceAllow=char-nvidia-uvm rw" in strict.read_text()


def test_rpm_spec_installs_files_that_exist() -> None:
    spec = (PACKAGING / "rpm" / "netdoctor.spec").read_text()
    for path in re.findall(r"\b(packaging/[\w./-]+)", spec):
        if "build-zipapp.py" in path:
            continue
        assert (REPO / path).is_file(), path
    assert list((REPO / "rules").glob("*.toml"))
    assert re.search(r"^Version:\s+(\S+)$", spec, re.M).group(1) in (REPO / "netdoctor" / "__init__.py").read_text()
    for installed in ("netdoctor-prolog", "netdoctor-healthcheck", "netdoctor.service", "netdoctor.timer", "slurm.conf",
                      "netdoctor.service.d/strict.conf"):
        assert spec.count(installed) >= 2, f"{installed} is installed and listed in %files"
    if shutil.which("rpmspec"):
        done = subprocess.run(["rpmspec", "-P", str(PACKAGING / "rpm" / "netdoctor.spec")], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
