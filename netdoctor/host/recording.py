"""What a capture read, in snapshot layout: the sys tree (`sysfs.RootedSysTree` records
each read, listing and link there), the commands, NVML and /proc files, for
`snapshot.write_snapshot`."""

from __future__ import annotations

import threading
from typing import Any

from netdoctor.host.types import CommandResult


class Recording:
    """Everything a capture read, in snapshot layout, for `write_snapshot`.

    Paths are relative to the snapshot's `sys/` directory. Thread-safe: commands are
    recorded from the runner's worker threads.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.files: dict[str, bytes] = {}
        self.dirs: set[str] = set()
        self.links: dict[str, str] = {}          # link path -> relative target
        self.commands: dict[str, CommandResult] = {}
        self.nvml: dict[str, Any] | None = None
        self.nvml_status: str | None = None
        self.proc: dict[str, bytes] = {}        # PROC_FILES name -> content, written under proc/
        self.nccl_env: dict[str, Any] | None = None
        self.visibility: dict[str, Any] | None = None   # snapshot.json `visibility`

    def add_proc(self, name: str, data: bytes) -> None:
        with self._lock:
            self.proc[name] = data

    def add_file(self, path: str, data: bytes) -> None:
        with self._lock:
            self.files[path] = data

    def add_dir(self, path: str) -> None:
        with self._lock:
            self.dirs.add(path)

    def add_link(self, path: str, target: str) -> None:
        with self._lock:
            self.links[path] = target

    def add_command(self, result: CommandResult) -> None:
        with self._lock:
            self.commands[result.name] = result

    def set_nvml(self, report: dict[str, Any] | None, status: str) -> None:
        with self._lock:
            self.nvml = report
            self.nvml_status = status
