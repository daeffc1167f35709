"""Counter history between runs: the state file, and baselines from an earlier snapshot.

Port error counters only mean something as growth over a known time. Each run swaps its
own reading into a small JSON file (`/var/lib/netdoctor/state.json` by default) and gets
the previous reading of the same host and boot back. A reboot (another boot_id) resets
the hardware counters, so an entry of another boot is never used as history.

The file is shared by concurrent runs (a SLURM prolog and an operator at once): an
exclusive `flock` on a sidecar `<path>.lock` serialises the read-modify-write, and the
new file is written to a temporary file in the same directory and renamed over the old
one, so a reader never sees half a file. Problems with the state file are logged and
never fatal: the check then judges absolute values.

Layout::

    {"format": "netdoctor.state/1",
     "entries": [{"host": "node017", "boot_id": "...", "captured_at": "2026-11-21T22:40:00Z",
                  "ports": {"mlx5_0:1": {"symbol_error": 0, "hw_counters/out_of_sequence": 3}}}]}
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import structlog

from netdoctor.checks.api import CounterHistory
from netdoctor.inventory.model import Inventory
from netdoctor.util import atomic_write, parse_iso_utc

log = structlog.get_logger(__name__)

STATE_FORMAT = "netdoctor.state/1"
HW_PREFIX = "hw_counters/"          # hw_counters live beside counters/ under this key prefix
MAX_BOOTS_PER_HOST = 2              # the current boot and the one before (for a late --baseline)
MAX_ENTRIES = 512                   # a state file on shared storage holds many hosts; bound it
LOCK_TIMEOUT_S = 10.0


def counter_readings(inventory: Inventory) -> dict[str, dict[str, int | None]]:
    """This inventory's counters per port: `counters/` names as-is, hw counters prefixed."""
    readings: dict[str, dict[str, int | None]] = {}
    for port in inventory.ports:
        values: dict[str, int | None] = dict(port.counters)
        values.update({f"{HW_PREFIX}{name}": value for name, value in port.hw_counters.items()})
        if values:
            readings[port.name] = values
    return readings


def parse_timestamp(text: str) -> datetime | None:
    """ISO 8601 (`2026-11-21T22:40:00Z`) -> aware UTC datetime; None when it does not parse."""
    try:
        return parse_iso_utc(text)
    except ValueError:
        return None


def elapsed_seconds(earlier: str, later: str) -> float | None:
    first, second = parse_timestamp(earlier), parse_timestamp(later)
    if first is None or second is None:
        return None
    return (second - first).total_seconds()


def _same_boot(previous_boot: str | None, current_boot: str | None) -> tuple[bool, str]:
    if previous_boot is None and current_boot is None:
        # Neither side knows its boot: accept, a reset then shows as a decrease (judged absolute).
        return True, "boot ids unknown on both readings"
    if previous_boot != current_boot:
        return False, f"different boot ({previous_boot or 'unknown'} -> {current_boot or 'unknown'}): counters were reset"
    return True, "same boot"


def _history_from_entry(entry: dict[str, Any], inventory: Inventory, source: str) -> CounterHistory | None:
    taken_at = entry.get("captured_at")
    elapsed = elapsed_seconds(taken_at, inventory.captured_at) if isinstance(taken_at, str) else None
    if elapsed is None:
        log.warning("counter history ignored", reason=f"unreadable timestamps {taken_at!r} / {inventory.captured_at!r}")
        return None
    if elapsed <= 0:
        log.warning("counter history ignored", reason=f"previous reading is not older ({elapsed:.0f} s)",
                    previous=taken_at, current=inventory.captured_at)
        return None
    ports = entry.get("ports")
    if not isinstance(ports, dict):
        return None
    clean: dict[str, dict[str, int | None]] = {}
    for port_name, values in ports.items():
        if not isinstance(values, dict):
            continue
        clean[str(port_name)] = {str(name): value if isinstance(value, int) and not isinstance(value, bool) else None
                                 for name, value in values.items()}
    return CounterHistory(taken_at=taken_at, elapsed_s=elapsed, ports=clean, source=source)


def _entries(document: Any) -> list[dict[str, Any]]:
    if not isinstance(document, dict) or document.get("format") != STATE_FORMAT:
        raise ValueError("not a netdoctor state file")
    entries = document.get("entries")
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise ValueError("entries is not a list of objects")
    return entries


def _read_entries(path: Path) -> list[dict[str, Any]]:
    """Entries of the state file; [] when it is absent, corrupt (logged) or unreadable (logged)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except OSError as error:
        log.warning("counter state unreadable", path=str(path), error=error.strerror or str(error))
        return []
    except UnicodeDecodeError as error:
        log.warning("counter state corrupt (not UTF-8); it will be replaced", path=str(path), error=str(error))
        return []
    try:
        return _entries(json.loads(text))
    except ValueError as error:  # json.JSONDecodeError is a ValueError
        log.warning("counter state corrupt; it will be replaced", path=str(path), error=str(error))
        return []


def _find_entry(entries: list[dict[str, Any]], inventory: Inventory) -> tuple[dict[str, Any] | None, str]:
    same_host = [entry for entry in entries if entry.get("host") == inventory.host]
    if not same_host:
        return None, "no earlier reading of this host"
    reasons = []
    for entry in sorted(same_host, key=lambda item: str(item.get("captured_at", "")), reverse=True):
        same, reason = _same_boot(entry.get("boot_id"), inventory.boot_id)
        if same:
            return entry, reason
        reasons.append(reason)
    return None, reasons[0]


def _regular_or_absent(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except FileNotFoundError:
        return True
    except OSError:
        return False


def read_counters(path: Path, inventory: Inventory) -> CounterHistory | None:
    """The previous reading of this host and boot from the state file, without writing it."""
    if not _regular_or_absent(path):
        return None
    entry, reason = _find_entry(_read_entries(path), inventory)
    if entry is None:
        log.info("no counter history", path=str(path), reason=reason)
        return None
    return _history_from_entry(entry, inventory, "state")


@contextlib.contextmanager
def _locked(lock_path: Path, timeout_s: float) -> Iterator[None]:
    # flock with a polling deadline: a blocking flock could hang a prolog forever behind a
    # stuck process, and SIGALRM-based timeouts are not allowed.
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as error:
                if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"{lock_path} is held by another netdoctor for more than {timeout_s:.0f} s") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)   # closing the descriptor releases the lock


def _write_atomic(path: Path, document: dict[str, Any]) -> None:
    atomic_write(path, json.dumps(document, separators=(",", ":"), sort_keys=True))


def _bounded(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep the newest MAX_BOOTS_PER_HOST boots of each host and MAX_ENTRIES overall."""
    newest_first = sorted(entries, key=lambda entry: str(entry.get("captured_at", "")), reverse=True)
    kept: list[dict[str, Any]] = []
    per_host: dict[str, int] = {}
    for entry in newest_first:
        host = str(entry.get("host"))
        if per_host.get(host, 0) >= MAX_BOOTS_PER_HOST:
            continue
        per_host[host] = per_host.get(host, 0) + 1
        kept.append(entry)
    return kept[:MAX_ENTRIES]


def exchange_counters(path: Path, inventory: Inventory, *, lock_timeout_s: float = LOCK_TIMEOUT_S) -> CounterHistory | None:
    """Store this inventory's counters in the state file and return the previous reading.

    The previous reading is the entry of the same host whose boot_id matches; None when
    there is none (first run, reboot), or the state file cannot be used (logged).
    """
    lock_path = path.with_name(path.name + ".lock")
    if not _regular_or_absent(path):
        # /dev/null, a FIFO, a directory: reading could block and replacing would destroy it.
        log.warning("counter state is not a regular file; no growth judgement this run", path=str(path))
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(lock_path, lock_timeout_s):
            entries = _read_entries(path)
            previous, reason = _find_entry(entries, inventory)
            history = _history_from_entry(previous, inventory, "state") if previous is not None else None
            if previous is None:
                log.info("no counter history", path=str(path), reason=reason)
            current = {
                "host": inventory.host,
                "boot_id": inventory.boot_id,
                "captured_at": inventory.captured_at,
                "ports": counter_readings(inventory),
            }
            others = [entry for entry in entries
                      if not (entry.get("host") == inventory.host and entry.get("boot_id") == inventory.boot_id)]
            _write_atomic(path, {"format": STATE_FORMAT, "entries": _bounded([current, *others])})
            return history
    except (OSError, TimeoutError) as error:
        # No writable state (not root, read-only /var): judge without history rather than fail the run.
        log.warning("counter state not updated", path=str(path), error=str(error))
        return read_counters(path, inventory)


def history_from_baseline(baseline: Inventory, current: Inventory) -> CounterHistory | None:
    """Counter history from an earlier snapshot of the same node (`--baseline`)."""
    if baseline.host != current.host:
        log.warning("baseline ignored", reason=f"baseline is of host {baseline.host!r}, not {current.host!r}")
        return None
    same, reason = _same_boot(baseline.boot_id, current.boot_id)
    if not same:
        log.warning("baseline ignored", reason=reason)
        return None
    entry = {"captured_at": baseline.captured_at, "ports": counter_readings(baseline)}
    return _history_from_entry(entry, current, "baseline")
