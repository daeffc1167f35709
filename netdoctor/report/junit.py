"""`--format junit`: one <testcase> per finding, for CI systems and test dashboards.

Mapping: fail -> <failure type="fail">; unknown -> <error type="unknown"> (the check
could not decide: an infrastructure problem, not a verdict); skip -> <skipped>; warn ->
a passing testcase with the warning in <system-out> (the node works, degraded: a CI
gate on "no failures" must let it through, as the exit code 1 distinguishes it);
shadow findings likewise pass with their status in <system-out>. classname is
`netdoctor.<check>`, name is the subject.
"""

from __future__ import annotations

import json

from netdoctor.report.model import Report, Status


def render_junit(report: Report) -> str:
    import xml.etree.ElementTree as ElementTree

    durations = {outcome.check: outcome.duration_s for outcome in report.checks}
    per_check: dict[str, int] = {}
    for finding in report.findings:
        per_check[finding.check] = per_check.get(finding.check, 0) + 1

    suites = ElementTree.Element("testsuites", name="netdoctor")
    suite = ElementTree.SubElement(suites, "testsuite", name=f"netdoctor {report.host}",
                                   hostname=report.host, timestamp=report.started_at.removesuffix("Z"))
    properties = ElementTree.SubElement(suite, "properties")
    for name, value in (("grade", str(report.grade)), ("rules", report.rules),
                        ("netdoctor", report.netdoctor_version)):
        ElementTree.SubElement(properties, "property", name=name, value=value)

    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for finding in report.findings:
        counts["tests"] += 1
        # A check's time is spread over its findings so the suite total stays right.
        time_s = durations.get(finding.check, 0.0) / max(per_check[finding.check], 1)
        case = ElementTree.SubElement(suite, "testcase", classname=f"netdoctor.{finding.check}",
                                      name=finding.subject, time=f"{time_s:.4f}")
        detail = _detail(finding.evidence, finding.remedy)
        if finding.shadow:
            ElementTree.SubElement(case, "system-out").text = f"{finding.status} (shadow, not graded): {finding.summary}\n{detail}"
        elif finding.status is Status.FAIL:
            counts["failures"] += 1
            ElementTree.SubElement(case, "failure", message=finding.summary, type="fail").text = detail
        elif finding.status is Status.UNKNOWN:
            counts["errors"] += 1
            ElementTree.SubElement(case, "error", message=finding.summary, type="unknown").text = detail
        elif finding.status is Status.SKIP:
            counts["skipped"] += 1
            ElementTree.SubElement(case, "skipped", message=finding.summary)
        elif finding.status is Status.WARN:
            ElementTree.SubElement(case, "system-out").text = f"warn: {finding.summary}\n{detail}"
    suite.set("time", f"{report.duration_s:.3f}")
    for key, value in counts.items():
        suite.set(key, str(value))
        suites.set(key, str(value))
    ElementTree.indent(suites)
    return ElementTree.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def _detail(evidence: dict[str, object], remedy: str | None) -> str:
    parts = []
    if evidence:
        parts.append("evidence: " + json.dumps(evidence, sort_keys=True, default=str))
    if remedy:
        parts.append(f"remedy: {remedy}")
    return "\n".join(parts)
