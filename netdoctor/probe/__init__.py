"""The NCCL probe: a short all-reduce over the node's GPUs, timed, verified and graded.

The probe is a check (`nccl-probe`, plugins/nccl_probe.py): the pipeline
(netdoctor.run) runs `run_probe` (netdoctor.probe.dispatch) after discovery and hands
the checks its typed `ProbeResult` (netdoctor.probe.result). Engines (netdoctor.probe.engine
.ProbeEngine): the ctypes worker (nccl_worker.py, which runs worker.py in its own
process) and nccl-tests (nccl_tests.py).

The engines are imported on first use (PEP 562): checks import only
netdoctor.probe.result and netdoctor.probe.expectation, and `check --no-probe` /
`check --snapshot` must not pay for the engines and the NCCL log parser at start-up.
"""

from __future__ import annotations

from typing import Any

__all__ = ["run_probe"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from netdoctor.probe import dispatch

        return getattr(dispatch, name)
    raise AttributeError(f"module 'netdoctor.probe' has no attribute {name!r}")
