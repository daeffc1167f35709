"""The counter-history state file: locked, bounded JSON storage (what is stored is checks.history's).

The file is shared by concurrent runs (a SLURM prolog and an operator at once): an
exclusive `flock` on a sidecar `<path>.lock` serialises the read-modify-write, and the new
file replaces the old one atomically (host.files), so a reader never sees half a file.
The lock is waited for only until the run's deadline: a stuck holder costs this run its
stored reading, never its report.

A state file is input netdoctor did not write itself this run (another process, another
user, a disk error may have changed it): it is read only up to MAX_STATE_BYTES and
MAX_DEPTH levels of nesting, both checked before parsing. One that is too large, too deep,
not JSON, not netdoctor's, or another user's in a directory others can write is not used:
a fresh history starts, and the problem is returned for the report.

Layout::

    {"format": "netdoctor.state/1", "entries": [ENTRY, ...]}
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import stat
import time
from collections.abc import Callable
from dataclasses import field
from pathlib import Path
from typing import Any

from netdoctor.host.files import UnsafePath, inspect_target, open_lock_file, read_regular, replacement
from netdoctor.logging import get_logger
from netdoctor.records import record

log = get_logger(__name__)

STATE_FORMAT = "netdoctor.state/1"
# 512 entries of a node with 18 ports of ~30 counters is ~5 MB: room to spare, and a bound
# on what json.loads may cost (a 500 MB file cost 1.6 GB of memory).
MAX_STATE_BYTES = 16 << 20
MAX_DEPTH = 8                     # the layout nests 5 deep; 100k levels used to crash every later run
LOCK_TIMEOUT_S = 10.0             # the most a run without a deadline waits for the lock
_LOCK_POLL_S = 0.05
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_INNERMOST = re.compile(r"\{\}|\[\]")
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")

Entries = list[dict[str, Any]]


class StateProblem(Exception):
    """The stored history cannot be used; the message says why, for the report."""


@record(frozen=True)
class StoredState:
    """What the state file held before this run (its entries), and what went wrong, if anything.

    `problem` is set when the run lost its stored history or its update for a reason the
    operator should see (a reset file, a lock held past the deadline, a refused path);
    plain unwritable locations (non-root, read-only /var) are only logged.
    """

    entries: Entries = field(default_factory=list)
    problem: str | None = None


def _too_deep(text: str, limit: int) -> bool:
    """Whether JSON `text` nests more than `limit` levels, without parsing it.

    Strings are dropped, then everything but brackets; each regex pass removes the innermost
    level, so this costs `limit` linear passes whatever the file holds (no recursion).
    """
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    for _ in range(limit):
        if not brackets:
            return False
        shallower = _INNERMOST.sub("", brackets)
        if len(shallower) == len(brackets):
            break
        brackets = shallower
    # A pair left is deeper than `limit`; so is a long run of unclosed brackets, which the
    # parser would also descend into before it saw the file end.
    return _INNERMOST.search(brackets) is not None or len(brackets) > limit


def _parse(data: bytes) -> Entries:
    """The entries of a state file's bytes; StateProblem when they cannot be used."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise StateProblem(f"not UTF-8 ({error.reason} at byte {error.start})") from None
    if _too_deep(text, MAX_DEPTH):
        raise StateProblem(f"nested more than {MAX_DEPTH} levels deep")
    try:
        document = json.loads(text)
    except ValueError as error:
        raise StateProblem(f"not JSON ({error})") from None
    if not isinstance(document, dict) or document.get("format") != STATE_FORMAT:
        raise StateProblem("not a netdoctor state file")
    entries = document.get("entries")
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise StateProblem("its entries are not a list of objects")
    return entries


def _load(path: Path) -> StoredState:
    """The stored entries; a file that cannot be used gives none and says why."""
    try:
        data = read_regular(path, MAX_STATE_BYTES)
        return StoredState(_parse(data) if data is not None else [])
    except (StateProblem, ValueError, UnsafePath) as error:
        why = error.strerror if isinstance(error, UnsafePath) else str(error)
        log.warning("counter state not usable; a fresh history starts", path=str(path), reason=why)
        return StoredState([], f"counter history in {path} was reset: {why}; a fresh history was started")


def load_entries(path: Path) -> StoredState:
    """The stored entries, without taking the lock or writing (a reader sees whole files)."""
    try:
        return _load(path)
    except OSError as error:
        log.warning("counter state unreadable", path=str(path), error=error.strerror or str(error))
        return StoredState()


def _lock(path: Path, wait_until: float) -> int | None:
    """A descriptor holding the exclusive lock at `path`; None when another holds it past `wait_until`."""
    descriptor = open_lock_file(path)
    while True:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return descriptor
        except OSError as error:
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                os.close(descriptor)
                raise
        # A blocking flock could hang a prolog behind a stuck process, and SIGALRM is not allowed.
        if time.monotonic() >= wait_until:
            os.close(descriptor)
            return None
        time.sleep(_LOCK_POLL_S)


def exchange_entries(path: Path, update: Callable[[Entries], Entries], *, deadline: float | None = None) -> StoredState:
    """Replace the stored entries with `update(entries)` under the lock; return what was stored before.

    The lock is waited for until `deadline` (monotonic; at most LOCK_TIMEOUT_S, at least one
    try). When it is not had, or the file cannot be written, the entries are read without it
    and nothing is stored. A FIFO or device (`--state /dev/null`) is neither read nor replaced.
    """
    wait_until = time.monotonic() + LOCK_TIMEOUT_S
    if deadline is not None:
        wait_until = min(wait_until, deadline)
    lock_path = path.with_name(path.name + ".lock")
    try:
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)   # never world-writable, whatever the umask
        reached = inspect_target(path)
        if reached is not None and not stat.S_ISREG(reached.st_mode):
            # /dev/null, a FIFO: reading could block and replacing would destroy it.
            log.warning("counter state is not a regular file; no growth judgement this run", path=str(path))
            return StoredState()
        descriptor = _lock(lock_path, wait_until)
        if descriptor is None:
            stored = load_entries(path)
            log.warning("counter state locked by another process past the deadline; this reading is not stored",
                        path=str(lock_path))
            return StoredState(stored.entries, stored.problem or (
                f"counter state {path} is locked by another process; gave up at the deadline, "
                "this reading was not stored"))
        try:
            stored = _load(path)
            with replacement(path, 0o644) as handle:
                handle.write(json.dumps({"format": STATE_FORMAT, "entries": update(stored.entries)},
                                        separators=(",", ":"), sort_keys=True).encode())
            return stored
        finally:
            os.close(descriptor)   # closing the descriptor releases the lock
    except UnsafePath as error:
        log.warning("counter state refused; no growth judgement this run", path=str(path), reason=error.strerror)
        return StoredState([], f"counter state {error.filename} refused: {error.strerror}")
    except OSError as error:
        # No writable state (not root, read-only /var): judge from what is stored, if anything.
        log.warning("counter state not updated", path=str(path), error=error.strerror or str(error))
        return load_entries(path)
