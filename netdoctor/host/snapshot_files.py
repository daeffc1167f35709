"""Reading a snapshot's own files: regular files only, each within its budget.

A snapshot may come from anywhere, so every file is opened without following links and
checked on its descriptor. The commands' outputs are only looked at when the snapshot is
opened (kind, size); each is read when discovery asks for it, and only when it is under its
row's budget (netdoctor.host.budgets): a 64 MB `commands/dmesg.out` costs a `stat`, not
64 MB of memory and the time to parse it.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

from netdoctor.errors import SnapshotError
from netdoctor.host.budgets import over_bytes, over_lines, too_large
from netdoctor.host.types import CommandResult, CommandSpec, CommandState
from netdoctor.records import record

# The most of a JSON file read at all (snapshot.json); nvml.json and nccl-env.json have
# smaller budgets of their own (their rows in netdoctor.host.sources).
MAX_JSON_BYTES = 16 * 1024 * 1024
# stderr is read for a failure's first line (and fi_info's answer): the runner's cap for it.
MAX_STDERR_BYTES = 4 * 1024 * 1024


def valid_command_name(name: str) -> bool:
    # Names become file names: perfquery-x-mlx5_0-1, mlnx_qos-ens1f0np0.
    return bool(name) and len(name) <= 200 and "/" not in name and "\x00" not in name and not name.startswith(".")


def _open_regular(path: Path, what: str) -> tuple[int, int] | None:
    """(descriptor, size) of a regular file inside the snapshot; None if absent. Links and devices are refused."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as error:
        if os.path.islink(path):
            raise SnapshotError(f"{what} is a symbolic link; a snapshot must hold it as a file") from error
        raise SnapshotError(f"cannot read {what}: {error.strerror}") from error
    info = os.fstat(descriptor)
    if not stat.S_ISREG(info.st_mode):
        os.close(descriptor)
        raise SnapshotError(f"{what} is not a regular file")
    return descriptor, info.st_size


def file_size(path: Path, what: str) -> int | None:
    """The size of a regular file inside the snapshot, without reading it; None if absent."""
    opened = _open_regular(path, what)
    if opened is None:
        return None
    os.close(opened[0])
    return opened[1]


def read_regular(path: Path, limit: int, what: str, *, refuse_larger: bool = True) -> bytes | None:
    """Content of a regular file inside the snapshot; None if absent. Larger than `limit`:
    refused (SnapshotError), or with `refuse_larger=False` its first `limit` bytes."""
    opened = _open_regular(path, what)
    if opened is None:
        return None
    descriptor, size = opened
    try:
        if size > limit and refuse_larger:
            raise SnapshotError(f"{what} is {size} bytes, more than the {limit}-byte limit")
        with os.fdopen(os.dup(descriptor), "rb") as handle:
            return handle.read(limit + 1)[:limit]
    finally:
        os.close(descriptor)


def load_json(path: Path, what: str, budget: int = MAX_JSON_BYTES) -> Any:
    """The JSON value of a snapshot file; None if absent. Bad JSON is a SnapshotError (one line)."""
    data = read_regular(path, budget, what)
    if data is None:
        return None
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise SnapshotError(f"{what} is not UTF-8 text (byte {error.start})") from error
    except json.JSONDecodeError as error:
        raise SnapshotError(f"{what} is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}") from error
    except RecursionError as error:
        raise SnapshotError(f"{what} nests deeper than netdoctor reads") from error
    except ValueError as error:     # an integer of more digits than Python converts
        raise SnapshotError(f"{what} is not valid JSON: {error}") from error


def parse_status(text: str, what: str) -> tuple[CommandState, int | None]:
    value = text.strip()
    if value == "timeout":
        return CommandState.TIMEOUT, None
    if value == "missing":
        return CommandState.MISSING, None
    try:
        code = int(value)
    except ValueError:
        raise SnapshotError(f"{what}: expected an exit status number, 'timeout' or 'missing', got {value[:40]!r}") from None
    return (CommandState.OK if code == 0 else CommandState.ERROR), code


@record(frozen=True)
class RecordedCommand:
    """One recorded tool run: its status now, its output read when asked, within the asker's budget."""

    name: str
    state: CommandState
    returncode: int | None
    duration_s: float
    out: Path
    out_size: int | None          # None: no NAME.out
    err: Path
    what: str

    @classmethod
    def load(cls, directory: Path, name: str, duration_s: float, what: str) -> RecordedCommand:
        out, err = directory / f"{name}.out", directory / f"{name}.err"
        out_size = file_size(out, f"{what}.out")
        file_size(err, f"{what}.err")          # a link or a device is refused when the snapshot is opened
        status = read_regular(directory / f"{name}.status", 4096, f"{what}.status")
        # A hand-made fixture may hold only NAME.out: that is a run that succeeded.
        state, code = parse_status(status.decode("utf-8", errors="replace"), f"{what}.status") if status is not None \
            else (CommandState.OK, 0)
        return cls(name, state, code, duration_s, out, out_size, err, what)

    def result(self, spec: CommandSpec) -> CommandResult:
        """The run as the live runner would have returned it under `spec`'s budget."""
        stderr = read_regular(self.err, MAX_STDERR_BYTES, f"{self.what}.err", refuse_larger=False) or b""
        result = CommandResult(self.name, self.state, stderr=stderr.decode("utf-8", errors="replace"),
                               returncode=self.returncode, duration_s=self.duration_s, argv=spec.argv)
        # A timeout or a missing tool stays what it was (its partial output is never parsed).
        judged = self.state in (CommandState.OK, CommandState.ERROR)
        why = over_bytes(self.out_size or 0, spec.max_output_bytes)
        if self.out_size is None or why:
            return too_large(result, why) if why and judged else result      # too large: not read at all
        data = read_regular(self.out, self.out_size, f"{self.what}.out", refuse_larger=False) or b""
        stdout = data.decode("utf-8", errors="replace")
        why = over_lines(stdout, spec.max_lines)
        return too_large(result, why) if why and judged else replace(result, stdout=stdout)
