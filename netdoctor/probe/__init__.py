"""The NCCL probe: a short all-reduce over the node's GPUs, timed, verified and graded.

`run_probe` is the entry point (see netdoctor.probe.engine); `netdoctor probe` is
netdoctor.probe.command.probe_command. The worker (worker.py) runs in its own process.

The engine is imported on first use (PEP 562): the `nccl-probe` check imports only
netdoctor.probe.expectation, and `check --no-probe` / `check --snapshot` must not pay
for the engine and the NCCL log parser at start-up.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DEFAULT_SIZES", "run_probe"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from netdoctor.probe import engine

        return getattr(engine, name)
    raise AttributeError(f"module 'netdoctor.probe' has no attribute {name!r}")
