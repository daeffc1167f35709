"""Security properties, end to end: no shell, safe loaders, hostile snapshots, plugins, report files.

Hostile snapshots and plugins are tested through the real CLI in a separate process:
exit 3, ONE clear line on stderr, no traceback, nothing read or written outside the
snapshot (TMPDIR is private to each test so leftovers of extraction would show).
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from netdoctor.report.render import emit

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "nodes" / "dgx-h100"
CLI = [sys.executable, "-c", "import sys; from netdoctor.cli import main; main()"]
SCANNED = [REPO / "netdoctor", REPO / "plugins", REPO / "packaging"]


def _python_files() -> list[Path]:
    return sorted(path for root in SCANNED if root.is_dir() for path in root.rglob("*.py"))


def _dangerous_calls(path: Path, root: Path = REPO) -> list[str]:
    """Calls that run a shell, evaluate text, or unpickle: `file:line what`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [alias.name for alias in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            if any(name.split(".")[0] in ("pickle", "cPickle", "dill", "marshal", "shelve") for name in names):
                found.append(f"{where} imports a pickle-like module")
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        name = function.id if isinstance(function, ast.Name) else function.attr if isinstance(function, ast.Attribute) else ""
        owner = function.value.id if isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name) else ""
        if name in ("eval", "exec") and not owner:
            found.append(f"{where} calls {name}()")
        if owner == "os" and name in ("system", "popen", "execl", "execlp", "execle", "execv", "execvp", "spawnl", "spawnlp"):
            found.append(f"{where} calls os.{name}()")
        if owner == "subprocess" and name in ("getoutput", "getstatusoutput"):
            found.append(f"{where} calls subprocess.{name}() (runs a shell)")
        for keyword in node.keywords:
            if keyword.arg == "shell" and not (isinstance(keyword.value, ast.Constant) and keyword.value.value is False):
                found.append(f"{where} passes shell=")
        if name == "load" and owner == "yaml":
            loader = next((keyword.value for keyword in node.keywords if keyword.arg == "Loader"), None)
            loader = loader if loader is not None else (node.args[1] if len(node.args) > 1 else None)
            loader_name = getattr(loader, "attr", getattr(loader, "id", ""))
            if loader_name not in ("SafeLoader", "CSafeLoader"):
                found.append(f"{where} calls yaml.load() without SafeLoader")
        if name in ("unsafe_load", "full_load") and owner == "yaml":
            found.append(f"{where} calls yaml.{name}()")
    return found


def test_scanner_finds_what_it_looks_for(tmp_path: Path) -> None:
    sample = tmp_path / "bad.py"
    sample.write_text(
        "import os, pickle, subprocess, yaml\n"
        "subprocess.run('ls', shell=True)\n"
        "os.system('ls')\n"
        "os.popen('ls')\n"
        "eval('1')\n"
        "exec('x = 1')\n"
        "yaml.load(text)\n"
        "yaml.load(text, Loader=yaml.SafeLoader)\n"
        "subprocess.run(['ls'], shell=False)\n"
    )
    problems = [line.split(" ", 1)[1] for line in _dangerous_calls(sample, tmp_path)]
    assert problems == ["imports a pickle-like module", "passes shell=", "calls os.system()", "calls os.popen()",
                        "calls eval()", "calls exec()", "calls yaml.load() without SafeLoader"]


def test_no_shell_eval_or_pickle_anywhere() -> None:
    files = _python_files()
    assert len(files) > 30          # the scan really covers the code base
    problems = [problem for path in files for problem in _dangerous_calls(path)]
    assert problems == []


def test_config_files_are_parsed_by_safe_loaders() -> None:
    text = "\n".join(path.read_text(encoding="utf-8") for path in _python_files())
    assert "import tomllib" in text            # rule packs are TOML, read by the standard library
    assert re.search(r"^\s*(import|from) (toml|yaml|ruamel)\b", text, re.M) is None


# -- the report file (-o) ---------------------------------------------------------------


def test_output_file_is_written_whole_with_mode_0644_and_no_leftovers(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    old_umask = os.umask(0o077)    # a prolog's strict umask must not make the report unreadable
    try:
        done = subprocess.run([*CLI, "check", "--no-probe", "--snapshot", str(FIXTURE), "--format", "json",
                               "-o", str(target)], capture_output=True, text=True, timeout=60)
    finally:
        os.umask(old_umask)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert json.loads(target.read_text())["grade"] == "pass"
    assert target.stat().st_mode & 0o777 == 0o644
    assert sorted(path.name for path in tmp_path.iterdir()) == ["report.json"]


def test_crash_mid_write_leaves_the_old_report_intact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "netdoctor.prom"
    target.write_text("netdoctor_grade 0\n")
    target.chmod(0o644)
    real_fsync = os.fsync

    def crash(descriptor: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(Exception, match="No space left on device"):
        emit("netdoctor_grade 2\n" * 1000, target)
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert target.read_text() == "netdoctor_grade 0\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["netdoctor.prom"]


def test_output_into_missing_directory_is_one_clear_error(tmp_path: Path) -> None:
    done = subprocess.run([*CLI, "check", "--no-probe", "--snapshot", str(FIXTURE), "-o",
                           str(tmp_path / "absent" / "report.txt")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    assert done.stderr.count("\n") == 1 and "cannot write" in done.stderr and "Traceback" not in done.stderr


# -- hostile snapshots, end to end ------------------------------------------------------


def _check_snapshot(path: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    private_tmp = tmp_path / "private-tmp"
    private_tmp.mkdir(exist_ok=True)
    env = dict(os.environ, TMPDIR=str(private_tmp))
    done = subprocess.run([*CLI, "check", "--no-probe", "--snapshot", str(path)], capture_output=True, text=True,
                          timeout=60, env=env)
    assert list(private_tmp.iterdir()) == [], "extraction left files behind"
    return done


def _assert_refused(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("netdoctor: error: ")
    for word in words:
        assert word in lines[0], lines[0]


def _copy_fixture(tmp_path: Path) -> Path:
    copy = tmp_path / "snap"
    shutil.copytree(FIXTURE, copy, symlinks=True)
    return copy


def test_bad_json_is_refused(tmp_path: Path) -> None:
    snapshot = _copy_fixture(tmp_path)
    (snapshot / "snapshot.json").write_text('{"format": "netdoctor.snapshot/1", "host": ')
    _assert_refused(_check_snapshot(snapshot, tmp_path), "snapshot.json", "not valid JSON")


def test_bad_nvml_json_is_refused(tmp_path: Path) -> None:
    snapshot = _copy_fixture(tmp_path)
    (snapshot / "nvml.json").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00garbage")
    _assert_refused(_check_snapshot(snapshot, tmp_path), "nvml.json")


def test_binary_garbage_instead_of_a_snapshot_is_refused(tmp_path: Path) -> None:
    garbage = tmp_path / "bundle.tar.gz"
    garbage.write_bytes(bytes(range(256)) * 64)
    _assert_refused(_check_snapshot(garbage, tmp_path), "not a readable tar archive")


def test_truncated_archive_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "snap.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(FIXTURE, arcname=".")
    data = archive.read_bytes()
    archive.write_bytes(data[: len(data) // 2])
    _assert_refused(_check_snapshot(archive, tmp_path), "truncated or corrupt")


def test_binary_garbage_in_a_tool_output_is_unknown_not_a_crash(tmp_path: Path) -> None:
    snapshot = _copy_fixture(tmp_path)
    (snapshot / "commands" / "nvidia-smi-topo-m.out").write_bytes(os.urandom(4096))
    done = subprocess.run([*CLI, "check", "--no-probe", "--snapshot", str(snapshot), "--format", "json"],
                          capture_output=True, text=True, timeout=60)
    assert "Traceback" not in done.stderr
    report = json.loads(done.stdout)
    [affinity] = [finding for finding in report["findings"]
                  if finding["check"] == "gpu-nic-affinity" and finding["status"] != "pass"]
    assert affinity["status"] == "unknown"
    assert "nvidia-smi-topo-m gave output that could not be parsed" in affinity["summary"]
    assert "\x1b" not in affinity["summary"]       # control bytes are escaped, never echoed raw
    assert report["grade"] == "unknown"


def test_sys_link_out_of_the_snapshot_is_refused(tmp_path: Path) -> None:
    snapshot = _copy_fixture(tmp_path)
    secret = tmp_path / "secret"
    secret.write_text("400 Gb/sec (4X NDR)\n")
    rate = snapshot / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "rate"
    rate = rate.resolve()
    rate.unlink()
    rate.symlink_to(secret)
    _assert_refused(_check_snapshot(snapshot, tmp_path), "rate", "is absolute")


def test_relative_link_climbing_out_is_refused(tmp_path: Path) -> None:
    snapshot = _copy_fixture(tmp_path)
    (tmp_path / "outside").mkdir()
    port = (snapshot / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1").resolve()
    (port / "state").unlink()
    depth = len(port.relative_to(snapshot).parts)
    (port / "state").symlink_to("../" * (depth + 1) + "outside/state")
    _assert_refused(_check_snapshot(snapshot, tmp_path))


def test_top_level_file_that_is_a_link_is_refused(tmp_path: Path) -> None:
    snapshot = _copy_fixture(tmp_path)
    (snapshot / "nvml.json").unlink()
    (snapshot / "nvml.json").symlink_to("/etc/hostname")
    _assert_refused(_check_snapshot(snapshot, tmp_path), "nvml.json", "symbolic link")


def test_fifo_in_a_snapshot_is_refused_without_blocking(tmp_path: Path) -> None:
    snapshot = _copy_fixture(tmp_path)
    out = snapshot / "commands" / "ibstat.out"
    out.unlink()
    os.mkfifo(out)
    started = time.monotonic()
    _assert_refused(_check_snapshot(snapshot, tmp_path), "ibstat.out", "not a regular file")
    assert time.monotonic() - started < 10


def test_huge_file_in_a_snapshot_is_refused(tmp_path: Path) -> None:
    snapshot = _copy_fixture(tmp_path)
    with open(snapshot / "commands" / "iblinkinfo.out", "wb") as handle:
        handle.truncate(65 * 1024 * 1024)      # sparse: costs no disk
    _assert_refused(_check_snapshot(snapshot, tmp_path), "iblinkinfo.out", "limit")


def _archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        tar.add(FIXTURE, arcname=".")
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.mode = 0o644
    return info


@pytest.mark.parametrize(("name", "kind", "link", "data", "words"), [
    ("../escaped", tarfile.REGTYPE, "", b"pwned", ("'..'",)),
    ("commands/../../escaped", tarfile.REGTYPE, "", b"pwned", ("'..'",)),
    ("/tmp/netdoctor-escaped", tarfile.REGTYPE, "", b"pwned", ("absolute",)),
    ("sys/class/evil", tarfile.SYMTYPE, "../../../../escaped", None, ("leaves the snapshot",)),
    ("sys/class/evil", tarfile.SYMTYPE, "/etc/passwd", None, ("absolute",)),
    ("sys/class/evil", tarfile.LNKTYPE, "../escaped", None, ("leaves the snapshot",)),
    ("sys/class/zero", tarfile.CHRTYPE, "", None, ("device",)),
    ("sys/class/fifo", tarfile.FIFOTYPE, "", None, ("FIFO",)),
], ids=["dotdot", "nested-dotdot", "absolute", "symlink-out", "symlink-absolute", "hardlink-out", "char-device", "fifo"])
def test_hostile_archive_members_are_refused(tmp_path: Path, name: str, kind: bytes, link: str, data: bytes | None,
                                             words: tuple[str, ...]) -> None:
    archive = _archive(tmp_path / "bundle.tar.gz", [(_member(name, kind, link), data)])
    done = _check_snapshot(archive, tmp_path)
    _assert_refused(done, *words)
    assert not (tmp_path / "escaped").exists()
    assert not Path("/tmp/netdoctor-escaped").exists()


def test_huge_archive_member_is_refused(tmp_path: Path) -> None:
    # The header claims 65 MiB; the archive itself stays small (zeros compress).
    archive = tmp_path / "bundle.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(FIXTURE, arcname=".")
        info = _member("commands/iblinkinfo.big")
        info.size = 65 * 1024 * 1024
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    _assert_refused(_check_snapshot(archive, tmp_path), "limit")


def test_good_archive_is_read_and_cleaned_up(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "snap.tar.gz", [])
    done = _check_snapshot(archive, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "dgx-h100: PASS" in done.stdout


# -- plugins ------------------------------------------------------------------------------

GOOD_PLUGIN = '''
from netdoctor.checks import check, Status

@check("site-good", "a well-behaved site check")
def good(ctx):
    yield ctx.passed("node", "fine")
'''
CRASHING_PLUGIN = '''
from netdoctor.checks import check

@check("site-crash", "a site check that raises")
def crash(ctx):
    raise RuntimeError("site bug")
'''
HANGING_PLUGIN = '''
import time
from netdoctor.checks import check

@check("site-hang", "a site check that never returns")
def hang(ctx):
    while True:
        time.sleep(1)
'''
EXITING_PLUGIN = '''
import sys
from netdoctor.checks import check

@check("site-exit", "a site check that calls sys.exit")
def leave(ctx):
    sys.exit(0)
'''
BROKEN_PLUGIN = "from netdoctor.checks import check\n@check(\n"
DUPLICATE_PLUGIN = '''
from netdoctor.checks import check

@check("port-state", "tries to replace a built-in check")
def impostor(ctx):
    yield ctx.passed("node", "all good, trust me")
'''


def _plugin_dir(tmp_path: Path, plugins: dict[str, str]) -> Path:
    directory = tmp_path / "plugins.d"
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)
    for name, text in plugins.items():
        path = directory / name
        path.write_text(text)
        path.chmod(0o644)
    return directory


def test_third_party_plugins_are_contained_like_builtins(tmp_path: Path) -> None:
    directory = _plugin_dir(tmp_path, {"good.py": GOOD_PLUGIN, "crash.py": CRASHING_PLUGIN, "hang.py": HANGING_PLUGIN,
                                       "exit.py": EXITING_PLUGIN, "broken.py": BROKEN_PLUGIN,
                                       "duplicate.py": DUPLICATE_PLUGIN})
    started = time.monotonic()
    done = subprocess.run([*CLI, "check", "--no-probe", "--snapshot", str(FIXTURE), "--format", "json",
                           "--deadline", "2", "--plugin-dir", str(directory)], capture_output=True, text=True, timeout=60)
    assert time.monotonic() - started < 2 + 1.0
    assert "Traceback" not in done.stderr
    report = json.loads(done.stdout)
    by_check = {}
    for finding in report["findings"]:
        by_check.setdefault(finding["check"], []).append(finding)
    assert [finding["status"] for finding in by_check["site-good"]] == ["pass"]
    [crash] = by_check["site-crash"]
    assert crash["status"] == "unknown" and "check crashed: RuntimeError: site bug" in crash["summary"]
    [hang] = by_check["site-hang"]
    assert hang["status"] == "unknown" and "deadline reached" in hang["summary"]
    [leave] = by_check["site-exit"]
    assert leave["status"] == "unknown" and "SystemExit" in leave["summary"]
    problems = {Path(finding["subject"]).name: finding["summary"] for finding in by_check["plugins"]}
    assert "SyntaxError" in problems["broken.py"]
    assert "duplicate check id 'port-state'" in " ".join(problems.values())
    # the impostor did not replace the built-in: port-state judged all 12 ports
    assert len(by_check["port-state"]) >= 10
    assert report["grade"] == "pass" and done.returncode == 0


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="plugin ownership is enforced only when running as root")


@needs_root
def test_root_refuses_a_group_or_world_writable_plugin_directory(tmp_path: Path) -> None:
    directory = _plugin_dir(tmp_path, {"good.py": GOOD_PLUGIN})
    directory.chmod(0o777)
    done = subprocess.run([*CLI, "check", "--no-probe", "--snapshot", str(FIXTURE), "--format", "json",
                           "--plugin-dir", str(directory)], capture_output=True, text=True, timeout=60)
    report = json.loads(done.stdout)
    assert "site-good" not in {finding["check"] for finding in report["findings"]}
    [problem] = [finding for finding in report["findings"] if finding["check"] == "plugins"]
    assert problem["status"] == "unknown"
    assert "plugin directory refused" in problem["summary"] and "writable by group and other" in problem["summary"]
    assert "plugin" in done.stderr          # the warning is also logged


@needs_root
def test_root_refuses_a_world_writable_plugin_file(tmp_path: Path) -> None:
    directory = _plugin_dir(tmp_path, {"good.py": GOOD_PLUGIN, "open.py": CRASHING_PLUGIN})
    (directory / "open.py").chmod(0o666)
    done = subprocess.run([*CLI, "checks", "--format", "json", "--plugin-dir", str(directory)],
                          capture_output=True, text=True, timeout=60)
    listing = json.loads(done.stdout)
    ids = {row["id"] for row in listing["checks"]}
    assert "site-good" in ids and "site-crash" not in ids
    [problem] = listing["plugin_problems"]
    assert problem["plugin"].endswith("open.py")
    assert "plugin file refused" in problem["problem"] and "writable by" in problem["problem"]


@needs_root
def test_root_refuses_a_plugin_owned_by_another_user(tmp_path: Path) -> None:
    directory = _plugin_dir(tmp_path, {"theirs.py": GOOD_PLUGIN})
    os.chown(directory / "theirs.py", 65534, 65534)
    done = subprocess.run([*CLI, "checks", "--format", "json", "--plugin-dir", str(directory)],
                          capture_output=True, text=True, timeout=60)
    [problem] = json.loads(done.stdout)["plugin_problems"]
    assert "owned by uid 65534, not root" in problem["problem"]


def test_special_files_are_written_through_not_replaced(tmp_path: Path) -> None:
    """`-o /dev/null` or a FIFO stays what it is; `--state /dev/null` means no history, and no hang."""
    import stat as stat_module
    import threading

    from netdoctor.host.files import atomic_write

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    atomic_write(fifo, "report\n")
    reader.join(5)
    assert received == [b"report\n"] and stat_module.S_ISFIFO(fifo.stat().st_mode)
    atomic_write("/dev/null", "report\n")
    assert stat_module.S_ISCHR(os.stat("/dev/null").st_mode)

    state_fifo = tmp_path / "state-fifo"
    os.mkfifo(state_fifo)
    done = subprocess.run([*CLI, "check", "--no-probe", "--deadline", "5", "--snapshot", str(FIXTURE),
                           "--state", str(state_fifo)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and stat_module.S_ISFIFO(state_fifo.stat().st_mode)


def test_state_file_with_binary_garbage_is_replaced_not_fatal(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    state.write_bytes(b"\xff\xfe garbage")
    done = subprocess.run([*CLI, "check", "--no-probe", "--snapshot", str(FIXTURE), "--state", str(state)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert json.loads(state.read_text())["entries"]


def test_plugin_whose_import_hangs_costs_the_plugins_not_the_deadline(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir(mode=0o755)
    (plugins / "slow.py").write_text("import time\ntime.sleep(1000)\n")
    (plugins / "slow.py").chmod(0o644)
    started = time.monotonic()
    done = subprocess.run([*CLI, "check", "--no-probe", "--format", "json", "--deadline", "4", "--snapshot", str(FIXTURE),
                           "--plugin-dir", str(plugins)], capture_output=True, text=True, timeout=30)
    assert time.monotonic() - started < 4 + 1.0
    report = json.loads(done.stdout)
    [problem] = [finding for finding in report["findings"] if finding["check"] == "plugins"]
    assert problem["status"] == "unknown" and "did not finish loading" in problem["summary"]
    assert {finding["check"] for finding in report["findings"]} >= {"port-state", "link-speed"}


# -- root writes: nothing another user plants can redirect -o, --state or capture -o ---------

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="simulates other users by chown: needs root")


def _nobody() -> int:
    import pwd

    return pwd.getpwnam("nobody").pw_uid


def _shared_directory(tmp_path: Path) -> Path:
    """A /tmp-like directory: world-writable and sticky."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    return shared


def _plant_link(shared: Path, name: str, target: Path) -> Path:
    """A symbolic link `name` in `shared` that user nobody made, pointing at `target`."""
    link = shared / name
    link.symlink_to(target)
    os.lchown(link, _nobody(), _nobody())
    return link


def _theirs(shared: Path, name: str) -> Path:
    """A file of user nobody in `shared`, holding "keep"."""
    theirs = shared / name
    theirs.write_text("keep")
    os.chown(theirs, _nobody(), _nobody())
    return theirs


def _check_to(output: Path, *extra: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "check", "--no-probe", "--snapshot", str(FIXTURE), "--format", "json",
                           "-o", str(output), *extra], capture_output=True, text=True, timeout=timeout)


def test_temporary_file_mode_is_set_on_its_descriptor_not_by_name(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # chmod by name lets another user swap the temporary name for a link between the write and
    # the chmod, making root chmod a file of their choice; only fchmod on the descriptor is safe.
    from netdoctor.host.files import atomic_write

    def chmod_by_name(*args: object, **kwargs: object) -> None:
        raise AssertionError("chmod by name")

    monkeypatch.setattr(os, "chmod", chmod_by_name)
    old_umask = os.umask(0o077)
    try:
        atomic_write(tmp_path / "report.prom", "netdoctor_grade 0\n", mode=0o644)
    finally:
        os.umask(old_umask)
    assert (tmp_path / "report.prom").stat().st_mode & 0o777 == 0o644


@ROOT_ONLY
def test_planted_link_to_a_fifo_is_refused_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = _plant_link(_shared_directory(tmp_path), "report.json", fifo)
    done = _check_to(link, "--deadline", "3")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "cannot write" in done.stderr and "symbolic link to a FIFO" in done.stderr
    assert link.is_symlink() and stat.S_ISFIFO(fifo.stat().st_mode)


@ROOT_ONLY
def test_planted_link_to_a_block_device_is_refused(tmp_path: Path) -> None:
    # A device number no driver serves (local/experimental major 240): the old code's write
    # through would only get ENXIO, never touch a disk; the refusal must come first.
    device = tmp_path / "disk"
    os.mknod(device, 0o600 | stat.S_IFBLK, os.makedev(240, 0))
    link = _plant_link(_shared_directory(tmp_path), "report.json", device)
    done = _check_to(link)
    assert done.returncode == 3 and "symbolic link to a block device" in done.stderr, done.stderr
    assert stat.S_ISBLK(device.stat().st_mode)


@ROOT_ONLY
def test_planted_link_to_another_users_file_is_refused_and_the_file_kept(tmp_path: Path) -> None:
    shared = _shared_directory(tmp_path)
    theirs = _theirs(shared, "theirs")
    link = _plant_link(shared, "report.json", theirs)
    done = _check_to(link)
    assert done.returncode == 3 and "symbolic link to a regular file of uid" in done.stderr, done.stderr
    assert theirs.read_text() == "keep" and link.is_symlink()


@ROOT_ONLY
def test_another_users_fifo_in_a_shared_directory_is_refused(tmp_path: Path) -> None:
    fifo = _shared_directory(tmp_path) / "report.json"
    os.mkfifo(fifo)
    os.chown(fifo, _nobody(), _nobody())
    done = _check_to(fifo, "--deadline", "3")
    assert done.returncode == 3 and "a FIFO of uid" in done.stderr, done.stderr


@ROOT_ONLY
def test_own_link_in_a_shared_directory_to_own_file_is_replaced_not_followed(tmp_path: Path) -> None:
    shared = _shared_directory(tmp_path)
    mine = tmp_path / "mine"
    mine.write_text("keep")
    link = shared / "report.json"
    link.symlink_to(mine)
    done = _check_to(link)
    assert done.returncode == 0, done.stderr
    assert mine.read_text() == "keep" and not link.is_symlink()
    assert json.loads(link.read_text())["grade"] == "pass"


def test_fifo_named_directly_without_a_reader_ends_by_the_deadline(tmp_path: Path) -> None:
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    done = _check_to(fifo, "--deadline", "3")      # the old code blocked in open() forever
    assert time.monotonic() - started < 3 + 30      # generous: only "ends", not "ends fast"
    assert done.returncode == 3 and "cannot write" in done.stderr and "deadline" in done.stderr, done.stderr
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_dev_stdout_named_directly_is_written_through(tmp_path: Path) -> None:
    done = _check_to(Path("/dev/stdout"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["grade"] == "pass"


@ROOT_ONLY
def test_planted_link_at_the_state_lock_creates_nothing(tmp_path: Path) -> None:
    shared = _shared_directory(tmp_path)
    elsewhere = tmp_path / "etc" / "created-by-root"
    elsewhere.parent.mkdir()
    _plant_link(shared, "state.json.lock", elsewhere)
    done = subprocess.run([*CLI, "check", "--no-probe", "--snapshot", str(FIXTURE), "--format", "json",
                           "--state", str(shared / "state.json")], capture_output=True, text=True, timeout=60)
    assert not elsewhere.exists()
    assert done.returncode == 0, done.stderr
    [note] = [finding for finding in json.loads(done.stdout)["findings"] if finding["check"] == "counter-history"]
    assert note["status"] == "unknown" and "symbolic link" in note["summary"]


@ROOT_ONLY
def test_capture_archive_through_a_planted_link_is_refused(tmp_path: Path) -> None:
    from netdoctor.host.snapshot import Recording, write_snapshot
    from netdoctor.errors import SnapshotError

    shared = _shared_directory(tmp_path)
    theirs = _theirs(shared, "theirs.tar.gz")
    link = _plant_link(shared, "capture.tar.gz", theirs)
    with pytest.raises(SnapshotError, match="symbolic link"):
        write_snapshot(Recording(), link, host="n", captured_at="2026-11-21T22:40:00Z", boot_id=None, version="0")
    assert theirs.read_text() == "keep"
    assert sorted(path.name for path in shared.iterdir()) == ["capture.tar.gz", "theirs.tar.gz"]


def test_dev_stdout_redirected_to_a_file_is_written_through_not_replaced(tmp_path: Path) -> None:
    # /dev/stdout then reaches a regular file; replacing "it" would put a file in /dev in
    # place of the link (for every process on the machine).
    log = tmp_path / "log"
    log.write_text("earlier line\n")
    with log.open("a") as appended:
        done = subprocess.run([*CLI, "check", "--no-probe", "--snapshot", str(FIXTURE), "--format", "json",
                               "-o", "/dev/stdout"], stdout=appended, stderr=subprocess.PIPE, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert os.path.islink("/dev/stdout")
    first, report = log.read_text().split("\n", 1)
    assert first == "earlier line" and json.loads(report)["grade"] == "pass"
