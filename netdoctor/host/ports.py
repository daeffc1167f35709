"""A free TCP port for a bootstrap root (NCCL_COMM_ID) that netdoctor starts itself."""

from __future__ import annotations

import socket


def free_tcp_port(address: str = "127.0.0.1") -> int:
    """A port the kernel has free on `address` now (it may be taken again before it is used:
    the caller's process reports a failed bind, which the probe turns into `unknown`)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((address, 0))
        return int(probe.getsockname()[1])
