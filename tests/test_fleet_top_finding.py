"""The fleet's `top` finding is the one that set the node's grade."""

from __future__ import annotations

from typing import Any

from netdoctor.fleet.model import NodeGrade, summarize_report
from test_fleet_collect import make_report


def finding(check: str, status: str, subject: str = "node", summary: str = "", **extra: Any) -> dict[str, Any]:
    return {"check": check, "status": status, "subject": subject, "summary": summary or f"{check} {status}",
            "evidence": {}, **extra}


def checks(required: set[str], *names: str) -> list[dict[str, Any]]:
    return [{"check": name, "status": "pass", "duration_s": 0.0, "required": name in required} for name in names]


def top_of(report: dict[str, Any]) -> tuple[str | None, str | None, str]:
    node = summarize_report(report)
    assert node.top is not None
    return node.top.check, node.top.subject, node.top.summary


def test_warn_node_tops_its_warn_not_a_non_required_unknown() -> None:
    report = make_report("n1", "warn", [
        finding("mtu", "unknown", summary="ibv_devinfo-v is missing: cannot read the active MTU"),
        finding("link-speed", "warn", "mlx5_3:1", "port runs at 4X NDR with 2 lanes"),
    ])
    report["checks"] = checks({"port-state", "link-speed"}, "port-state", "link-speed", "mtu")
    assert top_of(report) == ("link-speed", "mlx5_3:1", "port runs at 4X NDR with 2 lanes")


def test_unknown_node_tops_the_required_unknown() -> None:
    report = make_report("n1", "unknown", [
        finding("link-speed", "warn", "mlx5_0:1"),
        finding("mtu", "unknown", summary="mtu not judged"),                 # not required
        finding("port-state", "unknown", summary="ibstat timed out after 5 s"),
    ])
    report["checks"] = checks({"port-state"}, "port-state", "link-speed", "mtu")
    assert top_of(report) == ("port-state", "node", "ibstat timed out after 5 s")


def test_unknown_without_a_checks_list_tops_any_unknown() -> None:
    report = make_report("n1", "unknown", [finding("mtu", "warn"), finding("gpudirect", "unknown", summary="no NVML")])
    assert top_of(report) == ("gpudirect", "node", "no NVML")


def test_fail_node_tops_a_fail_and_ties_follow_the_reports_check_order() -> None:
    report = make_report("n1", "fail", [
        finding("zz-plugin", "fail", summary="a plugin failed"),
        finding("nccl-probe", "fail", summary="busbw low"),
        finding("port-state", "unknown", summary="required unknown"),
        finding("pcie-link", "fail", "0000:18:00.0", "x8 instead of x16"),
        finding("link-speed", "fail", "mlx5_3:1", "200 instead of 400"),
        finding("link-speed", "fail", "mlx5_4:1", "second link-speed fail"),
        finding("port-state", "fail", "mlx5_9:1", "shadowed", shadow=True),
    ])
    report["checks"] = checks({"port-state"}, "port-state", "link-speed", "pcie-link", "nccl-probe", "zz-plugin")
    assert top_of(report) == ("link-speed", "mlx5_3:1", "200 instead of 400")


def test_ties_follow_the_checks_list_and_unlisted_checks_go_last_alphabetically() -> None:
    # The engine lists third-party checks after the contract's; the fleet takes that order
    # from each report rather than loading the plugins itself.
    report = make_report("n1", "warn", [finding("zz-plugin", "warn"), finding("aa-plugin", "warn"),
                                        finding("nccl-probe", "warn", summary="probe slow")])
    report["checks"] = checks(set(), "nccl-probe", "zz-plugin", "aa-plugin")
    assert top_of(report)[0] == "nccl-probe"
    report["checks"] = checks(set(), "nccl-probe")
    assert top_of(report)[0] == "nccl-probe"
    report = make_report("n1", "warn", [finding("zz-plugin", "warn"), finding("aa-plugin", "warn")])
    assert top_of(report)[0] == "aa-plugin"


def test_shadow_findings_never_top_even_when_nothing_else_explains_the_grade() -> None:
    report = make_report("n1", "warn", [finding("mtu", "fail", shadow=True), finding("pfc-ecn", "warn", "ens1f0np0")])
    assert top_of(report)[:2] == ("pfc-ecn", "ens1f0np0")
    only_shadow = summarize_report(make_report("n1", "warn", [finding("mtu", "fail", shadow=True)]))
    assert only_shadow.grade is NodeGrade.WARN and only_shadow.top is None


def test_grade_not_explained_by_any_finding_tops_the_worst() -> None:
    report = make_report("n1", "fail", [finding("mtu", "warn", summary="mtu warn"),
                                        finding("gpudirect", "unknown", summary="gpudirect unknown")])
    assert top_of(report)[0] == "gpudirect"
