"""`netdoctor probe`'s text view: the measured sizes, how NCCL carried them, the findings."""

from __future__ import annotations

from netdoctor.probe.expectation import size_text
from netdoctor.probe.result import ProbeResult
from netdoctor.report.model import Report


def render_probe_text(report: Report) -> str:
    """A human summary of a probe-only report (its `probe` section and its findings)."""
    lines = [f"netdoctor probe on {report.host}: {str(report.grade).upper()}"]
    section = report.probe or {}
    result = ProbeResult.from_json(section) if "status" in section else None
    if result is not None:
        lines += _measurement(result)
    elif section:
        lines.append(f"  probe: {section.get('error') or section.get('skipped')}")
    for finding in report.findings:
        lines.append(f"  [{finding.status}] {finding.subject}: {finding.summary}")
        if finding.evidence.get("reasoning"):
            lines.append(f"         expected: {finding.evidence['reasoning']}")
        if finding.remedy and finding.status not in ("pass", "skip"):
            lines.append(f"         remedy: {finding.remedy}")
    lines.append(f"  took {report.duration_s:.2f} s")
    return "\n".join(lines) + "\n"


def _measurement(result: ProbeResult) -> list[str]:
    lines = []
    names = sorted({device.name for device in result.devices or () if device.name})
    if result.gpu_count:
        nccl = f"NCCL {result.nccl_version}" if result.nccl_version else "NCCL not loaded"
        lines.append(f"  engine {result.engine}, {nccl}, {result.gpu_count} GPU(s) {list(result.gpus)}"
                     + (f" ({', '.join(names)})" if names else ""))
    transport = result.transport
    if transport.kind:
        gdr = "" if transport.gdr is None else f", GPUDirect RDMA {'on' if transport.gdr else 'off'}"
        lines.append(f"  transport {transport.kind}, {transport.channels} channel(s){gdr}")
    if result.sizes:
        lines.append(f"  {'size':>10} {'time (us)':>11} {'algbw GB/s':>11} {'busbw GB/s':>11}  verified")
        for row in result.sizes:
            lines.append(f"  {size_text(row.bytes):>10} {row.time_us:>11.2f} {row.algbw_gbps:>11.2f} "
                         f"{row.busbw_gbps:>11.2f}  {'yes' if row.verified else 'NO'}")
    if result.status != "ok":
        lines.append(f"  probe {result.status}: {result.reason}")
    return lines
