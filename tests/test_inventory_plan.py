"""The discovery plan: only the sources the selected checks need, with the same findings."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from netdoctor.checks.registry import load_registry
from netdoctor.host.snapshot import open_snapshot
from netdoctor.inventory.build import build_inventory
from netdoctor.inventory.model import SourceState
from netdoctor.inventory.plan import NOT_NEEDED, Plan, with_implied
from netdoctor.run import CheckOptions, discovery_needs, run_check

ROOT = Path(__file__).resolve().parent
NODES = ROOT / "fixtures" / "nodes"
INDEX = tomllib.loads((NODES / "INDEX.toml").read_text(encoding="utf-8"))["fixtures"]
SNAPSHOTS = sorted(path for path in NODES.iterdir() if path.is_dir()) + sorted((ROOT / "data" / "device").glob("*/capture.tar.gz"))
REGISTRY = load_registry((), system_dir=None, entry_points=False)
CHECK_IDS = REGISTRY.ids()


def _findings(snapshot: Path, rules: str | None, only: tuple[str, ...] = ()) -> dict[str, list[dict[str, object]]]:
    report = run_check(CheckOptions(snapshot=snapshot, rules=rules, only=only, deadline_s=60.0), registry=REGISTRY, env={})
    by_check: dict[str, list[dict[str, object]]] = {}
    for finding in report.findings:
        by_check.setdefault(finding.check, []).append(finding.to_json())
    return by_check


def _checks_of(snapshot: Path) -> tuple[str, ...]:
    """Every check on healthy nodes and device captures (what a node class has decides what a
    check alone collects); on a faulted variant of a class, the checks its fault shows in."""
    entry = INDEX.get(snapshot.name) if snapshot.is_dir() else None
    if entry is None or entry["fault"] == "none":
        return CHECK_IDS
    shown = [finding[0] for key in ("expect", "expect_with_baseline") for finding in entry.get(key, {}).get("findings", ())]
    return tuple(check_id for check_id in CHECK_IDS if check_id in shown)


def _cases() -> list[object]:
    cases = [pytest.param(path, None, id=f"{path.parent.name if path.is_file() else path.name}-auto") for path in SNAPSHOTS]
    # An explicit pack adds no needs of its own (no auto-selection): each node class once.
    cases += [pytest.param(NODES / name, entry["rules"], id=f"{name}-{entry['rules']}")
              for name, entry in sorted(INDEX.items()) if entry["fault"] == "none"]
    return cases


@pytest.mark.parametrize(("snapshot", "rules"), _cases())
def test_only_one_check_gives_that_checks_findings_of_the_full_run(snapshot: Path, rules: str | None) -> None:
    full = _findings(snapshot, rules)
    assert full, "the full run gave no findings at all"
    for check_id in _checks_of(snapshot):
        alone = _findings(snapshot, rules, (check_id,))
        assert alone.get(check_id) == full.get(check_id), check_id


def test_implied_needs_are_closed() -> None:
    assert with_implied(frozenset({"qos"})) == {"qos", "roce", "rdma", "gpus", "topology"}
    assert with_implied(frozenset({"gpus"})) == {"gpus"}


def test_a_gpu_only_plan_runs_no_rdma_tool() -> None:
    with open_snapshot(NODES / "dgx-h100") as source:
        inventory = build_inventory(source, needs=frozenset({"gpus"}))
    for name in ("ibstat", "ibv_devinfo-v", "ibdev2netdev", "iblinkinfo"):
        assert inventory.source(name).state is SourceState.NOT_RUN and inventory.source(name).detail == NOT_NEEDED, name
    assert not any(name.startswith(("perfquery-x-", "mlnx_qos-")) for name in inventory.sources)
    assert inventory.source("nvml").state is SourceState.OK and len(inventory.gpus) == 8
    assert inventory.hcas   # sysfs is always read: it is where devices are found at all


def test_mlnx_qos_runs_only_for_roce_needs() -> None:
    def tools(needs: frozenset[str]) -> set[str]:
        with open_snapshot(NODES / "roce-h100") as source:
            inventory = build_inventory(source, needs=needs)
        return {name.split("-", 1)[0] for name, status in inventory.sources.items() if status.state is not SourceState.NOT_RUN}

    assert "mlnx_qos" in tools(frozenset({"roce"}))
    assert "mlnx_qos" not in tools(frozenset({"rdma"})) and "ibstat" in tools(frozenset({"rdma"}))


def test_no_needs_plans_everything_but_an_unasked_fabric_scan() -> None:
    plan = Plan.of(None, fabric_scan=False, is_snapshot=False)
    assert dict(plan.left_out()) == {"iblinkinfo": "fabric scan not asked for (--fabric-scan)"}


def test_discovery_needs() -> None:
    checks = {check.id: check for check in REGISTRY.checks()}
    assert discovery_needs([checks["pfc-ecn"]], rules="roce") == {"roce"}
    assert discovery_needs([checks["pfc-ecn"]], rules=None) == {"roce", "gpus", "rdma"}
    # A check that declares no needs may read anything.
    assert discovery_needs([checks["pfc-ecn"], checks["gpu-driver"]], rules="roce") is None


def test_a_live_only_row_is_not_run_on_a_snapshot() -> None:
    from netdoctor.host.sources import Source
    from netdoctor.inventory.plan import LIVE_ONLY

    row = Source("dmesg", ("dmesg",), "netdoctor.parsers.ibstat:parse_ibstat", in_snapshot=False)
    assert Plan.of(None, fabric_scan=False, is_snapshot=True).why_not(row) == LIVE_ONLY
    assert Plan.of(None, fabric_scan=False, is_snapshot=False).why_not(row) is None
