"""Where NVML's time goes on a GPU node: every pynvml call netdoctor's NVML reader makes, timed.

    python3 benchmarks/nvml_breakdown.py [--runs 3] [--json OUT]

Runs `netdoctor.host.nvml.collect_nvml` (the reader of a live `check`) with pynvml wrapped so
that each call's wall time is added to its function's total, and prints, per run, the whole
read and the functions by total time (nvmlInit and nvmlShutdown included). The CUDA DMA-BUF
query (libcuda's cuInit and attribute reads) is timed as one row. Needs the NVIDIA driver and
nvidia-ml-py; nothing is written to the GPUs.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import types
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[1]))   # after PYTHONPATH: a tree there is measured


class TimedModule(types.ModuleType):
    """pynvml with every function call timed into `totals` (name -> [calls, seconds])."""

    def __init__(self, module: types.ModuleType, totals: dict[str, list[float]]) -> None:
        super().__init__(module.__name__)
        self._module, self._totals = module, totals

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._module, name)
        if not (callable(value) and name.startswith("nvml")):
            return value

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return value(*args, **kwargs)
            finally:
                row = self._totals[name]
                row[0] += 1
                row[1] += time.perf_counter() - started
        return timed


def one_run() -> dict[str, Any]:
    from netdoctor.host.nvml import CudaDmabufQuery, collect_nvml

    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    query = CudaDmabufQuery()

    def dmabuf(address: str) -> bool | None:
        started = time.perf_counter()
        try:
            return query(address)
        finally:
            totals["cuda dmabuf query"][0] += 1
            totals["cuda dmabuf query"][1] += time.perf_counter() - started

    started = time.perf_counter()
    report, status = collect_nvml(TimedModule(importlib.import_module("pynvml"), totals), dmabuf_query=dmabuf)
    whole = time.perf_counter() - started
    return {"status": status, "gpus": len((report or {}).get("gpus", [])), "whole_s": round(whole, 4),
            "calls": {name: {"calls": int(row[0]), "s": round(row[1], 4)}
                      for name, row in sorted(totals.items(), key=lambda item: -item[1][1])}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    started = time.perf_counter()
    importlib.import_module("pynvml")
    runs = {"import_pynvml_s": round(time.perf_counter() - started, 4), "runs": []}
    for number in range(options.runs):
        run = one_run()
        runs["runs"].append(run)
        print(f"run {number + 1}: {run['whole_s']:.3f} s, {run['gpus']} GPUs, {run['status']}")
        for name, row in list(run["calls"].items())[:12]:
            print(f"  {name:45s} {row['calls']:5d} calls {row['s'] * 1000:8.1f} ms")
    if options.json:
        options.json.write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
