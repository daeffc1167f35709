"""Snapshots (CONTRACT.md section 4): write what a capture read, read it back as a NodeSource.

A snapshot may come from anywhere (support bundles, bug reports), so reading one treats
it as hostile: tar members are validated one by one and extracted by our own code into
a private temporary directory (no `..`, no absolute names, no links that leave it, no
device files, size and count caps), and the sys tree is read in strict mode.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from types import TracebackType
from typing import Any

from netdoctor.errors import SnapshotError
from netdoctor.host.budgets import SourceTooLarge, json_bytes, over_bytes
from netdoctor.host.files import replacement
from netdoctor.host.netdevs import NetdevFacts, collect_netdevs
from netdoctor.host.recording import Recording
from netdoctor.host.snapshot_files import RecordedCommand, file_size, load_json, valid_command_name
from netdoctor.host.snapshot_limits import check_directory
from netdoctor.host.sources import SOURCES_BY_NAME
from netdoctor.host.sysfs import RootedSysTree
from netdoctor.host.types import NOT_IN_SNAPSHOT, PROC_FILES, CommandResult, CommandSpec, CommandState
from netdoctor.host.visibility import visibility_from_json
from netdoctor.logging import get_logger
from netdoctor.util import parse_iso_utc

__all__ = ["SNAPSHOT_FORMAT", "Recording", "SnapshotSource", "open_snapshot", "write_snapshot"]

log = get_logger(__name__)

SNAPSHOT_FORMAT = "netdoctor.snapshot/1"
_TOP_LEVEL = ("snapshot.json", "nvml.json", "nccl-env.json", "sys", "commands", "proc")


class SnapshotSource:
    """A NodeSource that reads a snapshot directory. Use through `open_snapshot`."""

    is_snapshot = True

    def __init__(self, directory: Path, *, origin: str, cleanup: Path | None = None) -> None:
        self.directory = directory
        self.origin = origin
        self._cleanup = cleanup
        try:
            self._load()
        except BaseException:
            self.close()
            raise

    def _load(self) -> None:
        for name in _TOP_LEVEL:
            candidate = self.directory / name
            if candidate.is_symlink():
                raise SnapshotError(f"snapshot {self.origin}: {name} is a symbolic link")
        meta = load_json(self.directory / "snapshot.json", f"snapshot {self.origin}: snapshot.json")
        if meta is None:
            raise SnapshotError(f"{self.origin} is not a netdoctor snapshot: no snapshot.json")
        if not isinstance(meta, dict):
            raise SnapshotError(f"snapshot {self.origin}: snapshot.json must hold a JSON object")
        if meta.get("format") != SNAPSHOT_FORMAT:
            raise SnapshotError(f"snapshot {self.origin}: format is {meta.get('format')!r}, expected {SNAPSHOT_FORMAT!r}")
        host, captured_at, boot_id = meta.get("host"), meta.get("captured_at"), meta.get("boot_id")
        if not isinstance(host, str) or not host.strip():
            raise SnapshotError(f"snapshot {self.origin}: snapshot.json has no host name")
        if not isinstance(captured_at, str):
            raise SnapshotError(f"snapshot {self.origin}: snapshot.json has no captured_at time")
        try:
            parse_iso_utc(captured_at)
        except ValueError as error:
            raise SnapshotError(f"snapshot {self.origin}: captured_at {captured_at!r} is not an ISO 8601 time") from error
        if boot_id is not None and not isinstance(boot_id, str):
            raise SnapshotError(f"snapshot {self.origin}: boot_id must be a string")
        self.host: str = host
        self.captured_at: str = captured_at
        self.boot_id: str | None = boot_id
        durations = meta.get("command_durations", {})
        self._durations: dict[str, float] = (
            {key: float(value) for key, value in durations.items() if isinstance(value, (int, float))}
            if isinstance(durations, dict) else {}
        )
        nvml_status = meta.get("nvml_status")
        self._visibility = visibility_from_json(meta.get("visibility"))

        # nvml.json and nccl-env.json over their rows' budgets are sources too large to read,
        # as a live report that large would be (netdoctor.host.live), not a broken snapshot.
        self._too_large: dict[str, str] = {}
        nvml = self._load_report("nvml", "nvml.json")
        if nvml is not None and not isinstance(nvml, dict):
            raise SnapshotError(f"snapshot {self.origin}: nvml.json must hold a JSON object")
        if nvml is not None and not isinstance(nvml.get("gpus", []), list):
            raise SnapshotError(f"snapshot {self.origin}: nvml.json 'gpus' must be a list")
        seen_indexes: set[int] = set()
        for position, gpu in enumerate(nvml.get("gpus", []) if nvml is not None else []):
            # A GPU entry the inventory cannot place is a broken snapshot, not "no GPU".
            if not isinstance(gpu, dict) or type(gpu.get("index")) is not int:
                raise SnapshotError(f"snapshot {self.origin}: nvml.json gpus[{position}] must be an object "
                                    "with an integer 'index'")
            if gpu["index"] in seen_indexes:
                raise SnapshotError(f"snapshot {self.origin}: nvml.json lists GPU index {gpu['index']} twice")
            seen_indexes.add(gpu["index"])
        self._nvml: dict[str, Any] | None = nvml
        self._nvml_status = (
            "ok" if nvml is not None
            else nvml_status if isinstance(nvml_status, str) and nvml_status
            else "no nvml.json in snapshot (no NVIDIA driver)"
        )

        nccl_env = self._load_report("nccl-env", "nccl-env.json")
        if nccl_env is not None and not isinstance(nccl_env, dict):
            raise SnapshotError(f"snapshot {self.origin}: nccl-env.json must hold a JSON object")
        self._nccl_env: dict[str, Any] | None = nccl_env

        sys_directory = self.directory / "sys"
        if sys_directory.exists() and not sys_directory.is_dir():
            raise SnapshotError(f"snapshot {self.origin}: sys is not a directory")
        self.sys = RootedSysTree(sys_directory, strict=True)
        self._proc = RootedSysTree(self.directory / "proc", strict=True)
        self._commands = self._load_commands()

    def _load_report(self, row: str, name: str) -> Any:
        path, what = self.directory / name, f"snapshot {self.origin}: {name}"
        budget = SOURCES_BY_NAME[row].max_output_bytes
        why = over_bytes(file_size(path, what) or 0, budget)
        if why:
            self._too_large[row] = f"{name}: {why}"
            return None
        return load_json(path, what, budget)

    def _load_commands(self) -> dict[str, RecordedCommand]:
        """Each recorded command's status; its output is read when asked for (`run`), within budget."""
        directory = self.directory / "commands"
        if not directory.exists():
            return {}
        if not directory.is_dir():
            raise SnapshotError(f"snapshot {self.origin}: commands is not a directory")
        names = {entry.rsplit(".", 1)[0] for entry in os.listdir(directory)
                 if entry.rsplit(".", 1)[-1] in ("out", "err", "status")}
        return {name: RecordedCommand.load(directory, name, self._durations.get(name, 0.0),
                                           f"snapshot {self.origin}: commands/{name}")
                for name in sorted(names) if valid_command_name(name)}

    # -- NodeSource -------------------------------------------------------------------

    def run(self, specs: list[CommandSpec], deadline: float | None = None) -> dict[str, CommandResult]:
        """The recorded results of these commands, each within its spec's budget (too large: not
        read); a command not in the snapshot is MISSING."""
        results: dict[str, CommandResult] = {}
        for spec in specs:
            recorded = self._commands.get(spec.name)
            if recorded is None:
                results[spec.name] = CommandResult(spec.name, CommandState.MISSING, stderr=NOT_IN_SNAPSHOT, argv=spec.argv)
            else:
                results[spec.name] = recorded.result(spec)
        return results

    def nvml(self) -> tuple[dict[str, Any] | None, str]:
        if "nvml" in self._too_large:
            raise SourceTooLarge(self._too_large["nvml"])
        return self._nvml, self._nvml_status

    def netdevs(self) -> list[NetdevFacts]:
        return collect_netdevs(self.sys, use_netlink=False)

    def nccl_env(self) -> dict[str, Any] | None:
        if "nccl-env" in self._too_large:
            raise SourceTooLarge(self._too_large["nccl-env"])
        return self._nccl_env

    def visibility(self) -> dict[str, Any] | None:
        """What hid GPUs from the capturing process (snapshot.json `visibility`); None when not recorded."""
        return self._visibility

    # -- lifetime ---------------------------------------------------------------------

    def proc(self, name: str) -> str | None:
        return self._proc.read(name) if name in PROC_FILES else None   # like sys/: no link leads out

    def close(self) -> None:
        if self._cleanup is not None:
            import shutil   # here and below: a directory snapshot, the common case, needs none of them

            shutil.rmtree(self._cleanup, ignore_errors=True)
            self._cleanup = None

    def __enter__(self) -> SnapshotSource:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, trace: TracebackType | None) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


def open_snapshot(path: Path | str) -> SnapshotSource:
    """Open a snapshot directory or archive (`.tar.gz`, `.tgz`, or any tar) for reading.

    Raises SnapshotError with a one-line reason for anything malformed or unsafe.
    Use as a context manager so an extracted archive is removed afterwards.
    """
    location = Path(path)
    if location.is_dir():
        archives = [] if os.path.lexists(location / "snapshot.json") else sorted(
            entry.name for entry in location.iterdir() if entry.name.endswith((".tar.gz", ".tgz")))
        if archives:   # `--snapshot DIR` where DIR holds capture.tar.gz: point at the archive
            raise SnapshotError(f"{location} is not a netdoctor snapshot: no snapshot.json; it holds "
                                f"{', '.join(archives[:3])}: pass the archive, e.g. --snapshot {location / archives[0]}")
        check_directory(location)
        return SnapshotSource(location.resolve(), origin=str(location))
    if not location.exists():
        raise SnapshotError(f"snapshot {location} does not exist")
    if not location.is_file():
        raise SnapshotError(f"snapshot {location} is neither a directory nor an archive")
    import shutil
    import tempfile

    workdir = Path(tempfile.mkdtemp(prefix="netdoctor-snapshot-"))  # mode 0700: private
    try:
        extracted = workdir / "snapshot"
        extracted.mkdir(mode=0o700)
        from netdoctor.host.snapshot_tar import extract_tar

        extract_tar(location, extracted)
        root = extracted
        if not (root / "snapshot.json").exists():
            # Also accept archives made with one top-level directory (`tar czf x.tgz SNAP/`).
            entries = os.listdir(root)
            if len(entries) == 1 and (root / entries[0]).is_dir() and not (root / entries[0]).is_symlink():
                root = root / entries[0]
        return SnapshotSource(root, origin=str(location), cleanup=workdir)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise


# -- writing ------------------------------------------------------------------------------


def _status_text(result: CommandResult) -> str:
    if result.state is CommandState.TIMEOUT:
        return "timeout"
    if result.state is CommandState.MISSING:
        return "missing"
    if result.returncode is None:
        # Found but could not be started (permission denied): the shell's convention.
        return "126"
    return str(result.returncode)


def _plan(recording: Recording, meta: dict[str, Any]) -> list[tuple[str, str, bytes | str]]:
    """Every entry of the snapshot as (relative path, kind, content), parents before children.

    kind is `dir`, `file` (content bytes) or `link` (content: relative target).
    """
    claims: dict[str, tuple[str, bytes | str]] = {}

    def claim(path: str, kind: str, content: bytes | str) -> None:
        # First claim wins: directories are claimed first, then files, then links. Our
        # own path mapping never makes two claims collide; this guards the layout anyway.
        parts = path.split("/")
        ancestors = ["/".join(parts[:depth]) for depth in range(1, len(parts))]
        if any(claims.get(ancestor, ("dir",))[0] != "dir" for ancestor in ancestors):
            log.warning("snapshot entry skipped: a parent was recorded as a file or link", path=path)
            return
        existing = claims.get(path)
        if existing is not None:
            if existing[0] != kind or existing[1] != content:
                log.warning("snapshot entry skipped: recorded twice in different forms", path=path, kept=existing[0])
            return
        for ancestor in ancestors:
            claims.setdefault(ancestor, ("dir", b""))
        claims[path] = (kind, content)

    claim("sys", "dir", b"")
    for directory in sorted(recording.dirs):
        if directory:
            claim(f"sys/{directory}", "dir", b"")
    for path, data in sorted(recording.files.items()):
        claim(f"sys/{path}", "file", data)
    for path, target in sorted(recording.links.items()):
        claim(f"sys/{path}", "link", target)
    commands = dict(recording.commands)
    if commands:
        claim("commands", "dir", b"")
    for name, result in sorted(commands.items()):
        if not valid_command_name(name):
            log.warning("command not written to the snapshot: unsafe name", command=name)
            continue
        claim(f"commands/{name}.out", "file", result.stdout.encode("utf-8"))
        if result.stderr:
            claim(f"commands/{name}.err", "file", result.stderr.encode("utf-8"))
        claim(f"commands/{name}.status", "file", (_status_text(result) + "\n").encode())
    for name, data in sorted(recording.proc.items()):
        claim(f"proc/{name}", "file", data)
    if recording.nvml is not None:
        claim("nvml.json", "file", json_bytes(recording.nvml))
    if recording.nccl_env is not None:
        claim("nccl-env.json", "file", json_bytes(recording.nccl_env))
    claim("snapshot.json", "file", (json.dumps(meta, indent=1) + "\n").encode())
    return [(path, kind, content) for path, (kind, content) in sorted(claims.items(), key=lambda item: item[0].split("/"))]


def write_snapshot(recording: Recording, path: Path | str, *, host: str, captured_at: str, boot_id: str | None,
                   version: str) -> Path:
    """Write a snapshot: a directory, or a gzip'd tar when `path` ends in .tar.gz/.tgz.

    Atomic: built beside the target and renamed into place. An existing directory is
    never overwritten; an existing archive (or a symlink at `path`) is replaced, never
    written through.
    """
    target = Path(path)
    if not target.parent.is_dir():
        raise SnapshotError(f"cannot write snapshot {target}: directory {target.parent} does not exist")
    meta: dict[str, Any] = {"format": SNAPSHOT_FORMAT, "host": host, "captured_at": captured_at, "netdoctor": version}
    if boot_id:
        meta["boot_id"] = boot_id
    durations = {name: round(result.duration_s, 3) for name, result in sorted(recording.commands.items())}
    if durations:
        meta["command_durations"] = durations
    if recording.nvml is None and recording.nvml_status:
        meta["nvml_status"] = recording.nvml_status
    if recording.visibility is not None:
        meta["visibility"] = recording.visibility
    entries = _plan(recording, meta)
    try:
        if target.name.endswith((".tar.gz", ".tgz")):
            _write_archive(entries, target, parse_iso_utc(captured_at).timestamp())
        else:
            _write_directory(entries, target)
    except OSError as error:
        raise SnapshotError(f"cannot write snapshot {target}: {error.strerror or error}") from error
    log.info("snapshot written", path=str(target), files=sum(1 for entry in entries if entry[1] == "file"))
    return target


def _write_directory(entries: list[tuple[str, str, bytes | str]], target: Path) -> None:
    import shutil
    import tempfile

    if os.path.lexists(target):
        raise SnapshotError(f"cannot write snapshot {target}: it already exists")
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.tmp-"))
    try:
        for relative, kind, content in entries:
            full = staging / relative
            if kind == "dir":
                os.mkdir(full, 0o755)
                os.chmod(full, 0o755)
            elif kind == "link":
                os.symlink(str(content), full)
            else:
                descriptor = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
                with os.fdopen(descriptor, "wb") as handle:
                    handle.write(content if isinstance(content, bytes) else content.encode())
                    os.fchmod(handle.fileno(), 0o644)
        # On the descriptor: in a directory others can write, the name could be swapped for a link.
        staging_descriptor = os.open(staging, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fchmod(staging_descriptor, 0o755)
        finally:
            os.close(staging_descriptor)
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _write_archive(entries: list[tuple[str, str, bytes | str]], target: Path, mtime: float) -> None:
    import tarfile

    if target.is_dir() and not target.is_symlink():
        raise SnapshotError(f"cannot write snapshot {target}: a directory of that name exists")
    with replacement(target, 0o644) as handle:
        with tarfile.open(fileobj=handle, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
            for relative, kind, content in entries:
                info = tarfile.TarInfo(relative)
                info.mtime = int(mtime)
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                if kind == "dir":
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
                elif kind == "link":
                    info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, str(content)
                    tar.addfile(info)
                else:
                    data = content if isinstance(content, bytes) else content.encode()
                    info.mode, info.size = 0o644, len(data)
                    tar.addfile(info, io.BytesIO(data))
