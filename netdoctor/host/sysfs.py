"""Rooted, read-only access to a /sys tree: the live `/sys` or a snapshot's `sys/`.

Every path is resolved component by component inside the root, following symlinks
ourselves, so no read can leave the root: `..` never climbs above it, and in strict
(snapshot) mode a link that is absolute or climbs out is refused with SnapshotError.
On the live `/sys` absolute links under `/sys` are re-rooted; a link that leaves `/sys`
reads as absent.

With a `Recording` attached (capture mode) every successful read, listing and link
lookup is written down in the snapshot layout (CONTRACT.md section 4), so that reading
the snapshot later gives back exactly what was read live:

* `class/<class>/<name>` entries (symlinks into `devices/...` on a live system) become
  real directories;
* a PCI function keeps the place the kernel gave it in `devices/` (`devices/pci0000:15/
  0000:15:01.0/0000:16:00.0/0000:18:00.0`: the bridges above it are the path P2P traffic
  takes), and `bus/pci/devices/0000:18:00.0` becomes a relative link to it, as it is live;
  a function read where the kernel's link leaves no tree (an older snapshot keeps
  `bus/pci/devices/ADDR` as a directory) is stored there;
* any other link is stored as a relative link to the target's own path under `sys/`.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import field
from pathlib import Path

from netdoctor.errors import SnapshotError
from netdoctor.host.recording import Recording
from netdoctor.logging import get_logger
from netdoctor.records import record
from netdoctor.util import PCI_ADDRESS_RE

log = get_logger(__name__)

# A file's budget (the same live and in a snapshot, proc/ included): a sysfs attribute is at
# most one page (4 KiB, PCI config space too); a larger file is unreadable, never cut.
MAX_READ_BYTES = 64 * 1024
# The kernel gives up after 40 links (ELOOP); a snapshot with a loop gets the same treatment.
MAX_LINK_HOPS = 40
# _read_file's answer for a name that is itself a link (read after resolving it).
_FINAL_LINK = object()


class UnsafePathError(SnapshotError):
    """A path (or a link in a snapshot) would leave the root of the sys tree."""


@record
class _Resolution:
    """A path resolved inside the root, and where a snapshot keeps it."""

    physical: list[str]                 # components under the root, every link followed
    stored: list[str] | None            # components under the snapshot's sys/; None = cannot be recorded
    dirs: list[str] = field(default_factory=list)                 # directories to record
    links: list[tuple[str, str]] = field(default_factory=list)    # (link path, relative target) to record
    crossed_link: bool = False          # a link was followed on the way

    def copy(self) -> _Resolution:
        return _Resolution(list(self.physical), None if self.stored is None else list(self.stored), list(self.dirs),
                           list(self.links), self.crossed_link)


def _is_pci_tree_path(parts: list[str]) -> bool:
    """`devices/pci0000:15/.../0000:18:00.0`: a PCI function where the kernel placed it."""
    return len(parts) >= 3 and parts[0] == "devices" and parts[1].startswith("pci") and bool(PCI_ADDRESS_RE.match(parts[-1]))


def _user_parts(path: str) -> list[str]:
    """Split a caller's sys path; refuse absolute paths and `..` that climbs above the root."""
    if "\x00" in path:
        raise UnsafePathError(f"sys path {path!r} contains a NUL byte")
    if path.startswith("/"):
        raise UnsafePathError(f"sys path {path!r} must be relative to /sys (e.g. 'class/infiniband')")
    parts = [part for part in path.split("/") if part not in ("", ".")]
    depth = 0
    for part in parts:
        depth += -1 if part == ".." else 1
        if depth < 0:
            raise UnsafePathError(f"sys path {path!r} climbs above the root")
    return parts


class RootedSysTree:
    """A /sys tree under `root`. `strict=True` (snapshots) refuses links that leave the root.

    `strict` defaults to True for any root other than the live `/sys`.
    """

    def __init__(self, root: Path | str, recorder: Recording | None = None, *, strict: bool | None = None) -> None:
        self.root = Path(os.path.abspath(root))
        self._root_text = str(self.root)
        self.recording = recorder
        self.strict = strict if strict is not None else str(self.root) != "/sys"
        # Resolved directories (their parts -> resolution, None where a link leaves the
        # root). One tree is one discovery run: a snapshot never changes, and /sys does not
        # in the second a run takes.
        self._directories: dict[tuple[str, ...], _Resolution | None] = {}

    def __repr__(self) -> str:
        mode = "strict" if self.strict else "live"
        return f"RootedSysTree({str(self.root)!r}, {mode}{', recording' if self.recording else ''})"

    # -- resolution -------------------------------------------------------------------

    def _full(self, components: list[str]) -> str:
        return "/".join((self._root_text, *components)) if components else self._root_text

    def _escape(self, message: str) -> None:
        """A link leaves the root: refused in a snapshot, treated as absent on a live node."""
        if self.strict:
            raise UnsafePathError(f"snapshot {self.root}: {message}")
        log.debug("sys link leaves the root, treated as absent", root=str(self.root), detail=message)

    def _follow(self, directory: list[str], target: str, hops: int, where: str) -> list[str] | None:
        """Resolve link text `target` found in `directory`, following further links; None if it escapes."""
        if os.path.isabs(target):
            root_prefix = str(self.root).rstrip("/") + "/"
            if self.strict or not target.startswith(root_prefix):
                self._escape(f"link {where} -> {target} is absolute")
                return None
            resolved: list[str] = []
            pending = target[len(root_prefix):].split("/")
        else:
            resolved = list(directory)
            pending = target.split("/")
        pending.reverse()
        while pending:
            part = pending.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if not resolved:
                    self._escape(f"link {where} -> {target} climbs out of the root")
                    return None
                resolved.pop()
                continue
            candidate = resolved + [part]
            try:
                info = os.lstat(self._full(candidate))
            except OSError:
                resolved = candidate          # dangling: the rest cannot exist either
                continue
            if stat.S_ISLNK(info.st_mode):
                hops += 1
                if hops > MAX_LINK_HOPS:
                    self._escape(f"too many levels of links at {where}")
                    return None
                try:
                    inner = os.readlink(self._full(candidate))
                except OSError:
                    return None
                if os.path.isabs(inner):
                    root_prefix = str(self.root).rstrip("/") + "/"
                    if self.strict or not inner.startswith(root_prefix):
                        self._escape(f"link {'/'.join(candidate)} -> {inner} is absolute")
                        return None
                    resolved = []
                    inner = inner[len(root_prefix):]
                pending.extend(reversed(inner.split("/")))
            else:
                resolved = candidate
        return resolved

    @staticmethod
    def _stored_target(link_path: list[str], target: list[str]) -> list[str]:
        """Where a snapshot keeps what a link points to (see the module docstring)."""
        if len(link_path) == 3 and link_path[0] == "class":
            return link_path
        if target and PCI_ADDRESS_RE.match(target[-1]):
            return target if _is_pci_tree_path(target) else ["bus", "pci", "devices", target[-1]]
        return target

    def _cross_link(self, resolution: _Resolution, name: str, target_text: str, hops: int) -> bool:
        """Follow link `name` (in resolution.physical) and update both paths; False if it escapes."""
        where = "/".join(resolution.physical + [name])
        target = self._follow(resolution.physical, target_text, hops, where)
        if target is None:
            return False
        if resolution.stored is not None:
            link_path = resolution.stored + [name]
            mapped = self._stored_target(link_path, target)
            if mapped == link_path:
                resolution.dirs.append("/".join(link_path))
            else:
                relative = os.path.relpath("/".join(mapped), "/".join(resolution.stored) or ".")
                resolution.links.append(("/".join(link_path), relative))
            if _is_pci_tree_path(mapped) and link_path[:3] != ["bus", "pci", "devices"]:
                # Reached through another link (`class/infiniband/mlx5_0/device`): the bus
                # entry must lead to the same place, as it does live.
                bus_entry = f"bus/pci/devices/{mapped[-1]}"
                resolution.links.append((bus_entry, os.path.relpath("/".join(mapped), "bus/pci/devices")))
            resolution.stored = mapped
        resolution.physical = target
        return True

    def _resolve(self, path: str, follow_last: bool = True) -> _Resolution | None:
        """Resolve a caller's path; None when a link on the way leaves the root (live mode).

        The directory part is resolved once per tree and kept: the PCIe tree alone reads a
        dozen files in each of fifty directories seven links and levels deep."""
        parts = _user_parts(path)
        if not parts:
            return self._start()
        directory = self._resolve_directory(tuple(parts[:-1]), path)
        if directory is None:
            return None
        resolution = directory.copy()
        return resolution if self._step(resolution, parts[-1], follow_last, path) else None

    def _start(self) -> _Resolution:
        # Where a snapshot would keep a path matters only when recording (capture).
        return _Resolution(physical=[], stored=[] if self.recording is not None else None)

    def _resolve_directory(self, parts: tuple[str, ...], path: str) -> _Resolution | None:
        if not parts:
            return self._start()
        cached = self._directories.get(parts, False)
        if cached is not False:
            return cached  # type: ignore[return-value]
        parent = self._resolve_directory(parts[:-1], path)
        resolution = None
        if parent is not None:
            resolution = parent.copy()
            if not self._step(resolution, parts[-1], True, path):
                resolution = None
        self._directories[parts] = resolution
        return resolution

    def _step(self, resolution: _Resolution, part: str, follow: bool, path: str) -> bool:
        """Move `resolution` one component on; False when a link leaves the root (live mode)."""
        if part == "..":
            if not resolution.physical:
                raise UnsafePathError(f"sys path {path!r} climbs above the root")
            resolution.physical.pop()
            if resolution.stored is not None:
                # After a link the snapshot layout and the physical tree part ways;
                # climbing back up from there has no faithful recorded form.
                resolution.stored = None if resolution.crossed_link else resolution.stored[:-1]
            return True
        candidate = resolution.physical + [part]
        try:
            info = os.lstat(self._full(candidate))
        except OSError:
            info = None
        if info is not None and stat.S_ISLNK(info.st_mode) and follow:
            try:
                target_text = os.readlink(self._full(candidate))
            except OSError:
                return False
            if not self._cross_link(resolution, part, target_text, 1):
                return False
            resolution.crossed_link = True
        else:
            resolution.physical = candidate
            if resolution.stored is not None:
                resolution.stored = resolution.stored + [part]
        return True

    def _record_resolution(self, resolution: _Resolution) -> None:
        if self.recording is None:
            return
        for directory in resolution.dirs:
            self.recording.add_dir(directory)
        for link_path, target in resolution.links:
            self.recording.add_link(link_path, target)

    # -- SysTree ----------------------------------------------------------------------

    def read(self, path: str) -> str | None:
        """Text of a sysfs file with ONE trailing newline removed; None if absent or unreadable.
        Real sysfs attributes end in a newline; hand-made fixtures (gpud's) often do not, so only
        one is removed and `rate` etc. compare the same either way."""
        data = self.read_binary(path)
        if data is None:
            return None
        text = data.decode("utf-8", errors="replace")
        return text[:-1] if text.endswith("\n") else text

    def read_binary(self, path: str) -> bytes | None:
        """Raw content of a regular file; None if absent, unreadable or over MAX_READ_BYTES."""
        # Most reads are a plain name in a directory already resolved (a port's seventy counters):
        # opened without following links; a name that is a link (ELOOP) is resolved below.
        plain = self._plain_name(path) if self.recording is None else None
        data = self._read_file(self._full([*plain[0].physical, plain[1]]), path) if plain else _FINAL_LINK
        if data is not _FINAL_LINK:
            return data       # type: ignore[return-value]
        resolution = self._resolve(path)
        if resolution is None:
            return None
        data = self._read_file(self._full(resolution.physical), path)
        if data is None or data is _FINAL_LINK:
            return None
        if self.recording is not None:
            self._record_resolution(resolution)
            if resolution.stored is not None:
                self.recording.add_file("/".join(resolution.stored), data)   # type: ignore[arg-type]
            else:
                log.debug("sys read not recordable in a snapshot", path=path)
        return data                   # type: ignore[return-value]

    def _plain_name(self, path: str) -> tuple[_Resolution, str] | None:
        """(its directory resolved, kept: not to be changed; its last name) for a `path` ending
        in a plain name; None for the root or `..`, or a directory that leaves the root."""
        parts = _user_parts(path)
        if not parts or parts[-1] == "..":
            return None
        directory = self._resolve_directory(tuple(parts[:-1]), path)
        return None if directory is None else (directory, parts[-1])

    def _read_file(self, full: str, path: str) -> bytes | object | None:
        """The regular file at `full`, never following a link (_FINAL_LINK when it is one)."""
        try:
            # O_NONBLOCK: a FIFO planted in a snapshot must not hang the open.
            descriptor = os.open(full, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as error:
            if error.errno == errno.ELOOP:
                return _FINAL_LINK
            if error.errno not in (errno.ENOENT, errno.ENOTDIR):
                # EACCES (root-only attributes), EIO/ENODEV (device gone or in reset) are routine in /sys.
                log.debug("sys file unreadable", path=path, error=os.strerror(error.errno or 0))
            return None
        try:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                log.debug("sys path is not a regular file", path=path)
                return None
            chunks: list[bytes] = []
            size = 0
            while size <= MAX_READ_BYTES and (chunk := os.read(descriptor, MAX_READ_BYTES + 1 - size)):
                chunks.append(chunk)
                size += len(chunk)
            if size > MAX_READ_BYTES:
                log.warning("sys file over its budget, not read", path=path, budget_bytes=MAX_READ_BYTES)
                return None
            data = b"".join(chunks)
        except OSError as error:
            # e.g. /sys/class/net/<if>/speed gives EINVAL while the link is down.
            log.debug("sys file unreadable", path=path, error=os.strerror(error.errno or 0))
            return None
        finally:
            os.close(descriptor)
        return data

    def listdir(self, path: str) -> list[str]:
        """Sorted entries of a directory; [] if absent or not a directory."""
        resolution = self._resolve(path)
        if resolution is None:
            return []
        full = self._full(resolution.physical)
        try:
            names = sorted(os.listdir(full))
        except OSError:
            return []
        if self.recording is not None and resolution.stored is not None:
            self._record_resolution(resolution)
            self.recording.add_dir("/".join(resolution.stored))
            for name in names:
                self._record_entry(resolution, name)
        return names

    def _record_entry(self, directory: _Resolution, name: str) -> None:
        """Record one listed entry so the listing reads back the same (subdirectories, links)."""
        assert self.recording is not None and directory.stored is not None
        try:
            info = os.lstat(self._full(directory.physical + [name]))
        except OSError:
            return
        if stat.S_ISDIR(info.st_mode):
            self.recording.add_dir("/".join(directory.stored + [name]))
        elif stat.S_ISLNK(info.st_mode):
            entry = _Resolution(physical=list(directory.physical), stored=list(directory.stored))
            try:
                target_text = os.readlink(self._full(directory.physical + [name]))
                if self._cross_link(entry, name, target_text, 1):
                    self._record_resolution(entry)
            except (OSError, UnsafePathError):
                # A listing must not fail because one sibling link is odd; reading it will.
                return
        # Regular files are recorded when read: a file that could not be read live
        # reads as absent from the snapshot too.

    def is_dir(self, path: str) -> bool:
        resolution = self._resolve(path)
        # Every link on the way is resolved, so the last component is not a link here.
        if resolution is None or not os.path.isdir(self._full(resolution.physical)):
            return False
        if self.recording is not None and resolution.stored is not None:
            self._record_resolution(resolution)
            self.recording.add_dir("/".join(resolution.stored))
        return True

    def exists(self, path: str) -> bool:
        resolution = self._resolve(path)
        if resolution is None:
            return False
        full = self._full(resolution.physical)
        if not os.path.lexists(full):
            return False
        if self.recording is not None and resolution.stored is not None:
            if os.path.isdir(full):
                self._record_resolution(resolution)
                self.recording.add_dir("/".join(resolution.stored))
            else:
                self.read_binary(path)
        return True

    def pci_path(self, address: str) -> tuple[str, ...] | None:
        """The PCI functions from the root port down to `address`, where the kernel placed it
        (`bus/pci/devices/ADDR -> ../../../devices/pci0000:15/0000:15:01.0/.../ADDR`). None when
        the tree is not known: no such function, or a snapshot that kept the function as a plain
        `bus/pci/devices/ADDR` directory."""
        resolution = self._resolve(f"bus/pci/devices/{address}")
        if resolution is None or not _is_pci_tree_path(resolution.physical) or resolution.physical[-1] != address \
                or not os.path.isdir(self._full(resolution.physical)):
            return None
        self._record_resolution(resolution)
        if self.recording is not None and resolution.stored is not None:
            self.recording.add_dir("/".join(resolution.stored))
        return tuple(part for part in resolution.physical if PCI_ADDRESS_RE.match(part))

    def link_name(self, path: str) -> str | None:
        """Basename of a symlink's target (`class/infiniband/mlx5_0/device` -> `0000:18:00.0`)."""
        plain = self._plain_name(path)
        if plain is None:
            return None
        resolution, name = plain
        full = self._full(resolution.physical + [name])
        try:
            target_text = os.readlink(full)
        except OSError:
            return None
        basename = os.path.basename(target_text.rstrip("/"))
        if not basename or basename in (".", ".."):
            # `../..`-style targets: the name is that of the resolved directory.
            target = self._follow(resolution.physical, target_text, 1, "/".join(resolution.physical + [name]))
            basename = target[-1] if target else ""
        if self.strict or self.recording is not None:
            # Validates the target stays inside (strict) and records the link (capture).
            link = _Resolution(physical=list(resolution.physical), stored=resolution.stored)
            if not self._cross_link(link, name, target_text, 1):
                return None
            if self.recording is not None and resolution.stored is not None:
                self._record_resolution(resolution)
                self._record_resolution(link)
        return basename or None
