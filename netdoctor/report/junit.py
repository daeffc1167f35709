"""`--format junit`: one <testcase> per finding, for CI systems and test dashboards.

Mapping: fail -> <failure type="fail">; unknown -> <error type="unknown"> (the check
could not decide: an infrastructure problem, not a verdict); skip -> <skipped>; warn ->
a passing testcase with the warning in <system-out> (the node works, degraded: a CI
gate on "no failures" must let it through, as the exit code 1 distinguishes it);
shadow findings likewise pass with their status in <system-out>. classname is
`netdoctor.<check>`, name is the subject. Text from the node is escaped
(netdoctor.textsafe): XML 1.0 cannot carry control characters at all.

Test names are unique within a classname (CI dashboards key test history on
classname + name and merge or drop repeats): when a check judges one subject several
times, each of those names gets the finding's rule, `node [sm_mismatch]`, or, without
a rule (or with a rule shared in the group), its ordinal among them, `node #2`.
"""

from __future__ import annotations

import json

from netdoctor.report.model import Finding, Report, Status
from netdoctor.textsafe import safe_text


def junit_case_names(findings: list[Finding]) -> list[str]:
    """One testcase name per finding, unique within its check (see the module docstring)."""
    group_sizes: dict[tuple[str, str], int] = {}
    for finding in findings:
        key = (finding.check, finding.subject)
        group_sizes[key] = group_sizes.get(key, 0) + 1
    # First choice: the subject, or `subject [rule]` when the subject repeats.
    wanted: list[str] = []
    for finding in findings:
        repeated = group_sizes[(finding.check, finding.subject)] > 1
        wanted.append(f"{finding.subject} [{finding.rule}]" if repeated and finding.rule else finding.subject)
    wanted_counts: dict[tuple[str, str], int] = {}
    for finding, name in zip(findings, wanted):
        wanted_counts[(finding.check, name)] = wanted_counts.get((finding.check, name), 0) + 1
    # Names still shared get an ordinal; a suffix that happens to equal another
    # subject's name (a plugin's odd subject) moves on to the next free ordinal.
    taken = {(finding.check, name) for finding, name in zip(findings, wanted)}
    ordinals: dict[tuple[str, str], int] = {}
    names: list[str] = []
    for finding, name in zip(findings, wanted):
        key = (finding.check, name)
        if wanted_counts[key] == 1:
            names.append(name)
            continue
        ordinal = ordinals.get(key, 0)
        while True:
            ordinal += 1
            candidate = f"{name} #{ordinal}"
            if (finding.check, candidate) not in taken:
                break
        ordinals[key] = ordinal
        taken.add((finding.check, candidate))
        names.append(candidate)
    return names


def render_junit(report: Report) -> str:
    import xml.etree.ElementTree as ElementTree

    durations = {outcome.check: outcome.duration_s for outcome in report.checks}
    per_check: dict[str, int] = {}
    for finding in report.findings:
        per_check[finding.check] = per_check.get(finding.check, 0) + 1

    suites = ElementTree.Element("testsuites", name="netdoctor")
    host = safe_text(report.host)
    suite = ElementTree.SubElement(suites, "testsuite", name=f"netdoctor {host}",
                                   hostname=host, timestamp=report.started_at.removesuffix("Z"))
    properties = ElementTree.SubElement(suite, "properties")
    for name, value in (("grade", str(report.grade)), ("rules", report.rules),
                        ("netdoctor", report.netdoctor_version)):
        ElementTree.SubElement(properties, "property", name=name, value=safe_text(value))

    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for finding, name in zip(report.findings, junit_case_names(report.findings)):
        counts["tests"] += 1
        # A check's time is spread over its findings so the suite total stays right.
        time_s = durations.get(finding.check, 0.0) / max(per_check[finding.check], 1)
        case = ElementTree.SubElement(suite, "testcase", classname=safe_text(f"netdoctor.{finding.check}"),
                                      name=safe_text(name), time=f"{time_s:.4f}")
        detail = _detail(finding.evidence, finding.remedy)
        summary = safe_text(finding.summary)
        if finding.shadow:
            ElementTree.SubElement(case, "system-out").text = f"{finding.status} (shadow, not graded): {summary}\n{detail}"
        elif finding.status is Status.FAIL:
            counts["failures"] += 1
            ElementTree.SubElement(case, "failure", message=summary, type="fail").text = detail
        elif finding.status is Status.UNKNOWN:
            counts["errors"] += 1
            ElementTree.SubElement(case, "error", message=summary, type="unknown").text = detail
        elif finding.status is Status.SKIP:
            counts["skipped"] += 1
            ElementTree.SubElement(case, "skipped", message=summary)
        elif finding.status is Status.WARN:
            ElementTree.SubElement(case, "system-out").text = f"warn: {summary}\n{detail}"
    suite.set("time", f"{report.duration_s:.3f}")
    for key, value in counts.items():
        suite.set(key, str(value))
        suites.set(key, str(value))
    ElementTree.indent(suites)
    return ElementTree.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def _detail(evidence: dict[str, object], remedy: str | None) -> str:
    parts = []
    if evidence:
        parts.append("evidence: " + json.dumps(evidence, sort_keys=True, default=str))   # ASCII: controls escaped
    if remedy:
        parts.append(f"remedy: {safe_text(remedy)}")
    return "\n".join(parts)
