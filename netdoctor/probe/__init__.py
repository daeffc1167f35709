"""The NCCL probe: a short all-reduce over the node's GPUs, timed, verified and graded.

`run_probe` is the entry point (see netdoctor.probe.engine); `netdoctor probe` is
netdoctor.probe.command.probe_command. The worker (worker.py) runs in its own process.
"""

from netdoctor.probe.engine import DEFAULT_SIZES, run_probe

__all__ = ["DEFAULT_SIZES", "run_probe"]
