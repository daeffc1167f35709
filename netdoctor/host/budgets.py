"""Per-source budgets: the most of one source netdoctor reads, the same live and from a snapshot.

Each row of `netdoctor.host.sources.SOURCES` carries its budget (`max_output_bytes`,
`max_lines`), sized from what a big real node produces with a wide margin (the table in
docs/robustness.md, "Budgets"). A source that reaches its byte budget, or has more lines than
its line budget, is not parsed: a command's result becomes `CommandState.TOO_LARGE` naming the
budget it broke, a JSON report raises `SourceTooLarge`, the inventory records the source as
too large, and a check that needed it is `unknown` with that reason. A part of a source is
never judged as if it were the whole (the newest kernel-log lines are at its end).

Live, the runner keeps at most `max_output_bytes` of a tool's stdout (the row's budget in
`CommandSpec.max_output_bytes`); from a snapshot, a `commands/NAME.out` of that size or more is
not even read. Both measure the same thing, the bytes of the UTF-8 text a capture writes, and
count the same lines, so `check --snapshot` of a capture gives the live run's verdict.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from netdoctor.host.types import CommandResult, CommandSpec, CommandState


class SourceTooLarge(Exception):
    """A source over its budget (a snapshot's nvml.json or nccl-env.json); the text says by how much."""


def budget_text(size: int) -> str:
    """`32 MiB`, `64 KiB`, `900 bytes`: a budget as its table gives it."""
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size:,} bytes"


def line_count(text: str) -> int:
    """Lines as a parser sees them: a last line without its newline counts."""
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def over_bytes(size: int, max_bytes: int | None) -> str | None:
    """Why `size` bytes break the budget; None within it. Reaching the budget counts (the runner
    keeps no more, so there may have been more): the live run and a capture of it read back
    both say "32 MiB or more"; only a larger file, made by hand, tells its size."""
    if max_bytes is None or size < max_bytes:
        return None
    budget = budget_text(max_bytes)
    return f"{size:,} bytes, over its {budget} budget" if size > max_bytes else f"{budget} or more, over its budget"


def over_lines(text: str, max_lines: int | None) -> str | None:
    if max_lines is None:
        return None
    lines = line_count(text)
    return f"{lines:,} lines, over its {max_lines:,}-line budget" if lines > max_lines else None


def too_large(result: CommandResult, why: str) -> CommandResult:
    """The result without its output (never parsed, no longer held), saying which budget it broke."""
    return replace(result, state=CommandState.TOO_LARGE, stdout="", stderr=why)


def enforce(result: CommandResult, spec: CommandSpec) -> CommandResult:
    """A live tool's result held to its row's budget, measured as a snapshot would hold it."""
    if result.state not in (CommandState.OK, CommandState.ERROR):
        return result            # a timeout or a missing tool says more than its partial output
    why = over_bytes(len(result.stdout.encode("utf-8")), spec.max_output_bytes) or over_lines(result.stdout, spec.max_lines)
    return too_large(result, why) if why else result


def json_bytes(value: Any) -> bytes:
    """A JSON report as a snapshot holds it (`nvml.json`, `nccl-env.json`)."""
    return (json.dumps(value, indent=1, sort_keys=True) + "\n").encode()


def check_json(value: Any, max_bytes: int | None) -> None:
    """Raise SourceTooLarge when `value`, written into a snapshot, would break its budget."""
    if value is None or max_bytes is None:
        return
    try:
        size = len(json_bytes(value))
    except (TypeError, ValueError):
        return               # not JSON (a capture would say so); measuring must not break the live run
    why = over_bytes(size, max_bytes)
    if why:
        raise SourceTooLarge(why)
