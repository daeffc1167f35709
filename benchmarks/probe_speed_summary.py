"""Summarise a benchmarks/device_probe_speed.sh run as markdown (stdout).

    python3 benchmarks/probe_speed_summary.py OUTDIR

Per run and code state: `netdoctor probe`'s whole-process wall time, grade, busbw at 1 GiB
and the worker's phases; nccl-tests' busbw at 1 GiB of the same round and the ratio;
`check --no-probe` wall time beside the slowest source discovery waited for (from its
`-vv` log); `--version`. Medians at the end.
"""

from __future__ import annotations

import ast
import csv
import json
import re
import statistics
import sys
from pathlib import Path

from netdoctor.parsers.nccl_tests import parse_nccl_tests

GIB = 1 << 30
# `-vv` lines of netdoctor.host.live: `tools ran seconds={...}`, `nvml read seconds=0.41`.
TOOLS_RAN = re.compile(r"tools ran\s+seconds=(\{.*\})")
READ = re.compile(r"(nvml|netdevs) read\s+.*?seconds=([\d.]+)")


def wall_times(out: Path) -> dict[tuple[str, str], tuple[int, float]]:
    with (out / "times.tsv").open(encoding="utf-8") as handle:
        return {(label, name): (int(code), float(seconds)) for label, name, code, seconds in csv.reader(handle, delimiter="\t")}


def reference_busbw(out: Path, run: int) -> float | None:
    path = out / f"nccl-tests-{run}.txt"
    if not path.exists():
        return None
    rows = [row for parsed in parse_nccl_tests(path.read_text(encoding="utf-8")) for row in parsed.rows if row.size == GIB]
    return rows[0].out_of_place.busbw_gbps if rows else None


def slowest_source(log: str) -> tuple[str, float]:
    seconds: dict[str, float] = {}
    for match in TOOLS_RAN.finditer(log):
        seconds.update(ast.literal_eval(match[1]))
    for match in READ.finditer(log):
        seconds[match[1]] = float(match[2])
    return max(seconds.items(), key=lambda item: item[1]) if seconds else ("-", 0.0)


def main(out: Path) -> int:
    times = wall_times(out)
    runs = sorted({int(name.split("-")[1].split(".")[0]) for _, name in times if name.startswith("probe-")})
    labels = list(dict.fromkeys(label for label, _ in times))
    medians: dict[str, list[float]] = {}
    print("| run | code | probe wall s | grade | busbw 1 GiB GB/s | nccl-tests GB/s | ratio | worker phases s "
          "(loaded, contexts, nccl_init, measured, exited) | check with probe wall s | check --no-probe wall s | "
          "slowest source s | --version s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for run in runs:
        reference = reference_busbw(out, run)
        for label in labels:
            code, probe_s = times[(label, f"probe-{run}.json")]
            report = json.loads((out / f"{label}-probe-{run}.json").read_text(encoding="utf-8") or "{}")
            probe = report.get("probe") or {}
            busbw = probe.get("busbw_gbps")
            phases = probe.get("timings") or {}
            phase_text = ", ".join(f"{phases[name]:.2f}" if name in phases else "-"
                                   for name in ("loaded", "contexts", "nccl_init", "measured", "exited"))
            ratio = busbw / reference if busbw and reference else None
            _, check_s = times[(label, f"check-{run}.json")]
            full_s = times.get((label, f"full-{run}.json"), (0, None))[1]
            source, source_s = slowest_source((out / f"{label}-check-{run}.json.err").read_text(encoding="utf-8"))
            _, version_s = times[(label, f"version-{run}.txt")]
            for key, value in (("probe", probe_s), ("check", check_s), ("version", version_s), ("ratio", ratio),
                               ("source", source_s if source != "-" else None), ("full", full_s)):
                if value is not None:
                    medians.setdefault(f"{label}-{key}", []).append(value)
            print(f"| {run} | {label} | {probe_s:.2f} | {report.get('grade')} (exit {code}) | {busbw} | {reference} | "
                  f"{'-' if ratio is None else f'{ratio:.3f}'} | {phase_text} | "
                  f"{'-' if full_s is None else f'{full_s:.2f}'} | {check_s:.2f} | "
                  f"{'-' if source == '-' else f'{source} {source_s:.2f}'} | "
                  f"{version_s:.3f} |")
    print()
    print("| median | probe wall s | busbw ratio to nccl-tests | check with probe wall s | check --no-probe wall s | "
          "slowest source s | --version s |")
    print("|---|---|---|---|---|---|---|")
    for label in labels:
        cells = [f"{statistics.median(medians[f'{label}-{key}']):.3f}" if medians.get(f"{label}-{key}") else "-"
                 for key in ("probe", "ratio", "full", "check", "source", "version")]
        print(f"| {label} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
