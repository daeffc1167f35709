"""`netdoctor probe`: run the NCCL probe alone, grade it with the `nccl-probe` check, print it.

The probe grades from NVML facts it gathers itself, so it does not wait for a full
discovery of the node (ibstat, perfquery, ...): `netdoctor probe` takes little more
than the probe's own time.
"""

from __future__ import annotations

import socket
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from netdoctor import __version__
from netdoctor.errors import UsageError
from netdoctor.inventory.model import Gpu, Inventory, PcieLink, SourceState, SourceStatus
from netdoctor.probe.engine import run_probe
from netdoctor.report.model import Grade, Report, grade_of

CHECK_ID = "nccl-probe"


def parse_gpu_list(text: str | None) -> list[int] | None:
    """`"0,1,3"` -> [0, 1, 3]; None or empty -> None (all GPUs)."""
    if text is None or not text.strip():
        return None
    indices: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise UsageError(f"--gpus {text!r}: expected comma-separated GPU indices such as 0,1,2,3")
        if int(part) in indices:
            raise UsageError(f"--gpus {text!r}: GPU {part} is listed twice")
        indices.append(int(part))
    return indices


def inventory_from_probe(result: dict[str, Any], host: str, captured_at: str) -> Inventory:
    """A GPU-only inventory from the NVML facts the probe gathered (no full discovery)."""
    gpus = []
    for entry in result.get("gpu_links") or []:
        pcie = None
        if entry.get("pcie_gen") or entry.get("pcie_width"):
            pcie = PcieLink(address="", max_gen=entry.get("pcie_gen"), max_width=entry.get("pcie_width"), source="nvml")
        gpus.append(Gpu(index=int(entry["index"]), name=entry.get("name"), pcie=pcie,
                        nvlink_active=entry.get("nvlink_active"), nvlink_total=entry.get("nvlink_total"),
                        sources=("nvml",)))
    state = SourceState.OK if gpus else SourceState.MISSING
    return Inventory(host=host, captured_at=captured_at, gpus=gpus,
                     sources={"nvml": SourceStatus("nvml", state, "" if gpus else "no GPUs reported by NVML")})


def probe_command(gpus: str | None, engine: str, budget_s: float, output_format: str, output: Path | None,
                  rules: str | None, snapshot: Path | None) -> int:
    """The body of `netdoctor probe`; returns the exit code (0 pass, 1 warn, 2 fail, 3 unknown)."""
    from netdoctor.checks.engine import run_checks
    from netdoctor.checks.registry import Registry
    from netdoctor.checks.rules import load_rules
    from netdoctor.report.render import emit, render

    if snapshot is not None:
        raise UsageError("the NCCL probe runs only on a live node; --snapshot cannot be probed "
                         "(use `netdoctor check --snapshot` to judge a snapshot)")
    if engine not in ("auto", "nccl", "nccl-tests"):
        raise UsageError(f"--engine {engine!r}: choose auto, nccl or nccl-tests")
    if budget_s <= 0:
        raise UsageError(f"--budget {budget_s}: must be positive")
    indices = parse_gpu_list(gpus)
    started = time.monotonic()
    started_at = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    host = socket.gethostname()
    # An explicit pack is loaded first so that a bad --rules fails before the GPUs are touched.
    pack = load_rules(rules, None) if rules is not None else None
    # Loading the check plugins overlaps the probe (which mostly waits on its worker).
    registry = Registry()
    loader = threading.Thread(target=registry.load_builtins, name="load-checks", daemon=True)
    loader.start()
    result = run_probe(gpus=indices, engine=engine, budget_s=budget_s)
    loader.join()
    inventory = inventory_from_probe(result, host, started_at)
    if pack is None:
        pack = load_rules(None, inventory)
    findings, outcomes = run_checks(inventory, pack, registry, only=[CHECK_ID], probe=result,
                                    deadline=time.monotonic() + 5.0)
    grade = grade_of(findings, pack.required) if findings else Grade.UNKNOWN
    report = Report(host=host, grade=grade, started_at=started_at, duration_s=time.monotonic() - started,
                    rules=pack.name, findings=findings, checks=outcomes, probe=result, netdoctor_version=__version__)
    text = render(report, "json") if output_format == "json" else render_probe_text(report, result)
    if output_format not in ("text", "json"):
        text = render(report, output_format)
    emit(text, output)
    return report.grade.exit_code


def _size_text(size: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} B"


def render_probe_text(report: Report, result: dict[str, Any]) -> str:
    """A human summary: the measured sizes, how NCCL carried them, the findings."""
    lines = [f"netdoctor probe on {report.host}: {str(report.grade).upper()}"]
    devices = result.get("devices") or []
    names = sorted({device.get("name") for device in devices if device.get("name")})
    if result.get("gpu_count"):
        nccl = f"NCCL {result['nccl_version']}" if result.get("nccl_version") else "NCCL not loaded"
        lines.append(f"  engine {result.get('engine')}, {nccl}, {result['gpu_count']} GPU(s) {result.get('gpus')}"
                     + (f" ({', '.join(names)})" if names else ""))
    transport = result.get("transport") or {}
    if transport.get("kind"):
        gdr = transport.get("gdr")
        gdr_text = "" if gdr is None else f", GPUDirect RDMA {'on' if gdr else 'off'}"
        lines.append(f"  transport {transport['kind']}, {transport.get('channels')} channel(s){gdr_text}")
    if result.get("sizes"):
        lines.append(f"  {'size':>10} {'time (us)':>11} {'algbw GB/s':>11} {'busbw GB/s':>11}  verified")
        for row in result["sizes"]:
            lines.append(f"  {_size_text(row['bytes']):>10} {row['time_us']:>11.2f} {row['algbw_gbps']:>11.2f} "
                         f"{row['busbw_gbps']:>11.2f}  {'yes' if row.get('verified') else 'NO'}")
    if result.get("status") != "ok":
        lines.append(f"  probe {result.get('status')}: {result.get('reason')}")
    for finding in report.findings:
        lines.append(f"  [{finding.status}] {finding.subject}: {finding.summary}")
        if finding.evidence.get("reasoning"):
            lines.append(f"         expected: {finding.evidence['reasoning']}")
        if finding.remedy and finding.status not in ("pass", "skip"):
            lines.append(f"         remedy: {finding.remedy}")
    lines.append(f"  took {result.get('duration_s', 0):.2f} s")
    return "\n".join(lines) + "\n"
