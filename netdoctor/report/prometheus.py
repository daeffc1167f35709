"""`--format prometheus`: node_exporter textfile-collector format.

Write it with `-o /var/lib/node_exporter/textfile/netdoctor.prom` (the write is atomic,
as the textfile collector requires). Metrics (host comes from the scrape's `instance`):

    netdoctor_grade                           0 pass, 1 warn, 2 fail, 3 unknown (= exit code)
    netdoctor_check_status{check}             worst status of the check
    netdoctor_finding_status{check,subject,shadow}
                                              worst status of the check's findings on one subject
    netdoctor_run_duration_seconds            wall time of the run
    netdoctor_last_run_timestamp_seconds      Unix time the run started
    netdoctor_info{version,rules}             always 1
    netdoctor_nccl_busbw_gbps                 NCCL bus bandwidth, GB/s (only when the probe ran)

Values for dashboards (docs/metrics.md), each with a `host` label: the check durations,
the probe's bus bandwidth in bytes per second, and what netdoctor.checks.metrics takes from
the inventory (port rates and error counters, NVLink errors, module temperature and optical
power, BER). The families above keep the labels they always had.

Status values: 0 pass, 1 warn, 2 fail, 3 unknown, -1 skip (not applicable). Skips are
kept, as -1, so that "the check exists and has nothing to judge" differs from "metric
gone" (an absent series is what alerting on staleness looks for). Alert on `> 0`.

Every series is unique, as the textfile collector rejects a file with a repeated one.
A check may judge one subject several times (port-state says twice about `node`: the
SM LID agreement and the P_Key set), so findings are folded to one sample per
(check, subject, shadow) holding the worst status (fail > unknown > warn > pass > skip);
shadow findings fold separately under `shadow="true"`, since they are not graded.
"""

from __future__ import annotations

from decimal import Decimal

from netdoctor.report.model import STATUS_SEVERITY, MetricSample, Report, Status
from netdoctor.textsafe import safe_text
from netdoctor.util import parse_iso_utc

STATUS_VALUE = {Status.PASS: 0, Status.WARN: 1, Status.FAIL: 2, Status.UNKNOWN: 3, Status.SKIP: -1}


def escape_label_value(value: str) -> str:
    """Escape per the exposition format (backslash, double quote, line feed as `\\n`); other
    control characters from the node are spelled out first (netdoctor.textsafe), since a
    label value is shown on dashboards and terminals."""
    return "\\n".join(safe_text(line).replace("\\", "\\\\").replace('"', '\\"') for line in value.split("\n"))


def _labels(**labels: str) -> str:
    inner = ",".join(f'{name}="{escape_label_value(value)}"' for name, value in labels.items())
    return "{" + inner + "}" if inner else ""


def _number(value: float) -> str:
    """Full precision (`:g` would round a Unix timestamp to 6 digits); integers without `.0`;
    a small ratio (a BER) positional, `0.00000000083`, as every reader takes it."""
    if float(value).is_integer():
        return str(int(value))
    text = repr(float(value))
    return format(Decimal(text), "f") if "e-" in text else text


def _timestamp(started_at: str) -> float | None:
    try:
        return parse_iso_utc(started_at).timestamp()
    except ValueError:
        return None


def worst_finding_statuses(report: Report) -> dict[tuple[str, str, bool], Status]:
    """(check, subject, shadow) -> the worst status among those findings, in report order."""
    worst: dict[tuple[str, str, bool], Status] = {}
    for finding in report.findings:
        key = (finding.check, finding.subject, finding.shadow)
        known = worst.get(key)
        if known is None or STATUS_SEVERITY[finding.status] > STATUS_SEVERITY[known]:
            worst[key] = finding.status
    return worst


def worst_check_statuses(report: Report) -> dict[str, Status]:
    """check -> its worst outcome status (outcomes are one per check; folded all the same)."""
    worst: dict[str, Status] = {}
    for outcome in report.checks:
        known = worst.get(outcome.check)
        if known is None or STATUS_SEVERITY[outcome.status] > STATUS_SEVERITY[known]:
            worst[outcome.check] = outcome.status
    return worst


def render_prometheus(report: Report) -> str:
    from netdoctor.report.render import probe_busbw

    lines: list[str] = []

    def metric(name: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} gauge")
        lines.extend(f"{name}{labels} {_number(value)}" for labels, value in samples)

    metric("netdoctor_grade", "Node grade: 0 pass, 1 warn, 2 fail, 3 unknown (the exit code).",
           [("", report.grade.exit_code)])
    metric("netdoctor_check_status", "Worst status of each check: 0 pass, 1 warn, 2 fail, 3 unknown, -1 skip.",
           [(_labels(check=check), STATUS_VALUE[status]) for check, status in worst_check_statuses(report).items()])
    metric("netdoctor_finding_status",
           "Worst status of a check's findings on one subject: 0 pass, 1 warn, 2 fail, 3 unknown, -1 skip; "
           "shadow findings are not graded.",
           [(_labels(check=check, subject=subject, shadow=str(shadow).lower()), STATUS_VALUE[status])
            for (check, subject, shadow), status in worst_finding_statuses(report).items()])
    metric("netdoctor_run_duration_seconds", "Wall-clock duration of the netdoctor run.",
           [("", round(report.duration_s, 3))])
    started = _timestamp(report.started_at)
    if started is not None:
        metric("netdoctor_last_run_timestamp_seconds", "Unix time at which the netdoctor run started.",
               [("", started)])
    metric("netdoctor_info", "netdoctor version and rule pack of the run.",
           [(_labels(version=report.netdoctor_version, rules=report.rules), 1)])
    busbw = probe_busbw(report.probe)
    if busbw is not None:
        metric("netdoctor_nccl_busbw_gbps", "NCCL all-reduce bus bandwidth of the local GPUs, GB/s.",
               [("", busbw)])
    lines.extend(value_lines(report))
    return "\n".join(lines) + "\n"


def value_lines(report: Report) -> list[str]:
    """The value families, each with the report's `host` label first: check durations, the
    probe's bus bandwidth and the inventory's values (report.metrics)."""
    from netdoctor.checks.metrics import FAMILIES
    from netdoctor.report.render import probe_busbw

    host = (("host", report.host),)
    durations: dict[str, float] = {}
    for outcome in report.checks:     # one outcome per check; a repeat keeps the longest
        durations[outcome.check] = max(outcome.duration_s, durations.get(outcome.check, 0.0))
    families: dict[str, tuple[str, str]] = {
        "netdoctor_check_duration_seconds": ("gauge", "Wall-clock time one check took in this run."),
        "netdoctor_probe_busbw_bytes_per_second": (
            "gauge", "NCCL all-reduce bus bandwidth of the local GPUs at the largest size, bytes per second."),
        **FAMILIES}
    samples: dict[str, list[MetricSample]] = {name: [] for name in families}
    samples["netdoctor_check_duration_seconds"] = [
        MetricSample("netdoctor_check_duration_seconds", (("check", check),), round(seconds, 4))
        for check, seconds in durations.items()]
    busbw = probe_busbw(report.probe)
    if busbw is not None:
        samples["netdoctor_probe_busbw_bytes_per_second"] = [
            MetricSample("netdoctor_probe_busbw_bytes_per_second", (), busbw * 1e9)]
    for sample in report.metrics:
        samples.setdefault(sample.name, []).append(sample)
    lines: list[str] = []
    for name, (kind, help_text) in families.items():
        if not samples[name]:
            continue
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(f"{name}{_labels(**dict(host + sample.labels))} {_number(sample.value)}" for sample in samples[name])
    return lines
