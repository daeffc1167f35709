"""Process helpers the tests share: is a process gone (dead or a zombie)?"""

from __future__ import annotations

import time

import psutil


def gone(pid: int, within_s: float = 2.0) -> bool:
    """Dead (or a zombie) within `within_s`: SIGKILL is delivered asynchronously."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
