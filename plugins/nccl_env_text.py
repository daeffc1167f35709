"""How `nccl-env` quotes a setting in its findings (shared by its modules; defines no check)."""

from __future__ import annotations

from netdoctor.parsers.nccl_env import Setting

# Display bounds (engineering defaults, not thresholds): entries named in one summary, characters
# of a value quoted, items of a list kept in evidence.
SHOWN = 8
QUOTED = 200
EVIDENCE_ITEMS = 64


def quoted(value: str) -> str:
    return repr(value) if len(value) <= QUOTED else f"{value[:QUOTED]!r}... ({len(value) - QUOTED:,} more characters)"


def origin(setting: Setting) -> str:
    """`NAME='value' (from the environment)` / `(in /etc/nccl.conf)`."""
    where = "from the environment" if setting.origin == "environment" else "in " + setting.origin
    return f"{setting.name}={quoted(setting.value)} ({where})"


def remedy(setting: Setting, fix: str) -> str:
    where = "where the job's environment sets it" if setting.origin == "environment" else f"in {setting.origin}"
    return f"{fix} ({where})"
