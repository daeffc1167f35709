"""phy: BER before and after FEC (mlxlink -c), PHY/pause/per-priority counters (ethtool -S), by growth."""

from __future__ import annotations

import dataclasses

import pytest

from inventory_factory import by_subject, dgx_h100, roce_node, run_check
from netdoctor.checks.api import CounterHistory
from netdoctor.checks.history import counter_readings
from netdoctor.inventory.model import Inventory, PortState, QosConfig, SourceState, SourceStatus
from netdoctor.inventory.render import render_inventory_text
from netdoctor.parsers.mlxlink_counters import PhyCounters
from netdoctor.report.model import Status
from netdoctor_plugins.phy import phy

CHECK = "phy"
DAY_S = 86400.0
# A healthy NDR port a day after its last clear: ~2e-9 before FEC (400 Gb/s, 4 lanes), nothing after.
LANE_BITS_PER_DAY = 100e9 * DAY_S


def healthy(lane_ber: float = 2e-9, **changes: object) -> PhyCounters:
    lanes = tuple(int(lane_ber * LANE_BITS_PER_DAY) for _ in range(4))
    base = PhyCounters(state="Active", speed="IB-NDR", lanes=4, fec="Standard_RS-FEC - (544,514)", status_opcode=0,
                       recommendation="No issue was observed", since_clear_s=DAY_S, symbol_errors=0, symbol_ber=0.0,
                       effective_errors=0, effective_ber=0.0, raw_errors_per_lane=lanes,
                       raw_ber=float(f"{lane_ber:.0e}"), link_down=0, link_error_recovery=0)
    return dataclasses.replace(base, **changes)


def ib_node(**per_port: PhyCounters) -> Inventory:
    inventory = dgx_h100()
    for hca in inventory.hcas:
        for port in hca.ports.values():
            inventory.phy[port.name] = per_port.get(hca.name, healthy())
    return inventory


def run(inventory: Inventory, history: CounterHistory | None = None, **overrides: object) -> dict[str, list]:
    return by_subject(run_check(phy, CHECK, inventory, pack_name="dgx-h100", history=history, overrides=overrides))


def history_of(inventory: Inventory, elapsed_s: float = 600.0) -> CounterHistory:
    return CounterHistory(taken_at="2026-11-21T22:30:00Z", elapsed_s=elapsed_s, ports=counter_readings(inventory))


def test_healthy_ports_pass_with_their_ber() -> None:
    findings = run(ib_node())
    finding = findings["mlx5_0:1"][0]
    assert finding.status is Status.PASS
    assert finding.summary.startswith("BER before FEC 2.0e-9, after FEC 0 since the counters were last cleared")
    assert finding.evidence["pre_fec_ber"] == pytest.approx(2e-9, rel=0.01)
    # The storage ports are not compute rails: not judged.
    assert all(f.status is Status.SKIP for name, items in findings.items() for f in items if name.startswith("mlx5_9"))


@pytest.mark.parametrize(("lane_ber", "status"), [(1e-7, Status.PASS), (3e-6, Status.WARN), (5e-4, Status.FAIL)])
def test_raw_ber_against_the_fec_limit(lane_ber: float, status: Status) -> None:
    [finding] = run(ib_node(mlx5_3=healthy(lane_ber)))["mlx5_3:1"]
    assert finding.status is status
    if status is not Status.PASS:
        assert "RS-FEC (544,514)" in finding.summary and "mlxlink -d mlx5_3 -c -e" in finding.remedy


def test_one_bad_lane_is_named() -> None:
    lanes = (100, 100, int(2e-5 * LANE_BITS_PER_DAY), 100)
    [finding] = run(ib_node(mlx5_1=healthy(raw_errors_per_lane=lanes, raw_ber=5e-6)))["mlx5_1:1"]
    assert finding.status is Status.WARN and "worst lane 2 at 2.0e-5" in finding.summary


def test_effective_ber_past_the_limit_fails() -> None:
    [finding] = run(ib_node(mlx5_2=healthy(effective_errors=900_000, effective_ber=3e-11)))["mlx5_2:1"]
    assert finding.status is Status.FAIL and finding.rule == "effective_ber_limit"


def test_growth_since_the_last_run_is_judged_not_the_diluted_average() -> None:
    before = ib_node()
    after = ib_node(mlx5_2=healthy(since_clear_s=DAY_S + 600, effective_errors=6000, symbol_errors=6000,
                                   effective_ber=2e-14, symbol_ber=2e-14))
    assert run(after)["mlx5_2:1"][0].status is Status.PASS          # the printed average is under the limit
    [finding] = run(after, history_of(before))["mlx5_2:1"]
    assert finding.status is Status.FAIL
    assert "in the 10 min since the last run" in finding.summary
    assert finding.evidence["post_fec_ber"] == pytest.approx(6000 / (400e9 * 600))


def test_a_few_errors_after_fec_warn_with_history() -> None:
    before = ib_node()
    after = ib_node(mlx5_2=healthy(since_clear_s=DAY_S + 600, effective_errors=3))
    [finding] = run(after, history_of(before))["mlx5_2:1"]
    assert finding.status is Status.WARN and finding.rule == "effective_errors_severity"


def test_counters_cleared_between_runs_fall_back_to_the_printed_window() -> None:
    before = ib_node(mlx5_2=healthy(effective_errors=5000))
    after = ib_node(mlx5_2=healthy(since_clear_s=300.0, effective_errors=0, raw_errors_per_lane=(0, 0, 0, 0)))
    [finding] = run(after, history_of(before))["mlx5_2:1"]
    assert finding.status is Status.PASS and "since the counters were last cleared" in finding.summary


def test_the_firmware_s_own_verdict_warns() -> None:
    [finding] = run(ib_node(mlx5_4=healthy(status_opcode=17, recommendation="Bad signal integrity")))["mlx5_4:1"]
    assert finding.status is Status.WARN and "Bad signal integrity" in finding.summary


def test_a_down_port_is_left_to_port_state() -> None:
    inventory = ib_node()
    inventory.port("mlx5_5:1").state = PortState.DOWN
    [finding] = run(inventory)["mlx5_5:1"]
    assert finding.status is Status.SKIP


def test_no_mlxlink_anywhere_is_one_unknown() -> None:
    inventory = dgx_h100()
    inventory.sources["mlxlink-c-mlx5_0"] = SourceStatus("mlxlink-c-mlx5_0", SourceState.MISSING, "mlxlink not installed")
    findings = run(inventory)
    assert [f.status for f in findings["node"]] == [Status.UNKNOWN]
    assert "no physical-layer readings (8 compute ports)" in findings["node"][0].summary


# -- RoCE: ethtool -S ------------------------------------------------------------------------------

def roce(**stats_by_netdev: dict[str, int]) -> Inventory:
    inventory = roce_node()
    inventory.uptime_s = DAY_S
    for netdev in inventory.netdevs:
        netdev.qos = QosConfig("dscp", (3,), "OS controlled")
        netdev.stats = {"rx_corrected_bits_phy": int(1e-9 * 400e9 * DAY_S), "rx_pcs_symbol_err_phy": 0,
                        "tx_pause_storm_warning_events": 0, "tx_pause_storm_error_events": 0, "link_down_events_phy": 0,
                        "rx_prio3_pause": 10, "rx_prio3_discards": 0, "rx_prio3_buf_discard": 0,
                        "rx_prio0_discards": 5000, **stats_by_netdev.get(netdev.name, {})}
    return inventory


def test_roce_healthy_passes_and_lossy_priority_drops_are_not_judged() -> None:
    findings = by_subject(run_check(phy, CHECK, roce()))
    assert {f.status for items in findings.values() for f in items} == {Status.PASS}


def test_corrected_bits_give_the_pre_fec_ber() -> None:
    before = roce()
    after = roce(ens3f0np0={"rx_corrected_bits_phy": before.netdev("ens3f0np0").stats["rx_corrected_bits_phy"]
                            + int(3e-4 * 400e9 * 600)})
    findings = by_subject(run_check(phy, CHECK, after, history=history_of(before)))
    [finding] = findings["mlx5_2:1"]
    assert finding.status is Status.FAIL and "RS-FEC (544,514)" in finding.summary
    # Alone, the same count over the uptime is a lower bound: 7.2e10 bits in a day at 400 Gb/s ~ 2e-6: under warn.
    assert by_subject(run_check(phy, CHECK, after))["mlx5_2:1"][0].status is Status.PASS


def test_pause_storms_fail_when_new_and_warn_when_undated() -> None:
    before = roce()
    after = roce(ens2f0np0={"tx_pause_storm_error_events": 2})
    assert by_subject(run_check(phy, CHECK, after))["mlx5_1:1"][0].status is Status.WARN
    [finding] = by_subject(run_check(phy, CHECK, after, history=history_of(before)))["mlx5_1:1"]
    assert finding.status is Status.FAIL and "pause storm" in finding.summary


def test_drops_on_the_lossless_priority_warn_by_growth() -> None:
    before = roce()
    after = roce(ens2f0np0={"rx_prio3_buf_discard": 500, "rx_prio0_discards": 90000})
    assert by_subject(run_check(phy, CHECK, after))["mlx5_1:1"][0].status is Status.PASS   # under the absolute
    [finding] = by_subject(run_check(phy, CHECK, after, history=history_of(before)))["mlx5_1:1"]
    assert finding.status is Status.WARN and "lossless priority 3" in finding.summary
    # Without mlnx_qos the priorities PFC protects are those the driver counts pauses on.
    after.netdev("ens2f0np0").qos = None
    [finding] = by_subject(run_check(phy, CHECK, after, history=history_of(before)))["mlx5_1:1"]
    assert "the driver's pause counters" in finding.summary


def test_a_reloaded_driver_is_not_an_interval() -> None:
    before = roce(ens2f0np0={"tx_pause_storm_error_events": 5})
    after = roce(ens2f0np0={"tx_pause_storm_error_events": 1})
    [finding] = by_subject(run_check(phy, CHECK, after, history=history_of(before)))["mlx5_1:1"]
    assert finding.status is Status.WARN and "since the driver loaded" in finding.summary


def test_mlxlink_stands_over_ethtool_for_the_ber() -> None:
    inventory = roce(ens1f0np0={"rx_corrected_bits_phy": int(1e-3 * 400e9 * DAY_S)})
    inventory.phy["mlx5_0:1"] = healthy(speed="400G", symbol_errors=None, symbol_ber=None)
    [finding] = by_subject(run_check(phy, CHECK, inventory))["mlx5_0:1"]
    assert finding.status is Status.PASS and finding.evidence["pre_fec_ber"] == pytest.approx(2e-9, rel=0.01)


def test_discover_shows_ber_per_port_and_the_roce_priority_chain() -> None:
    text = render_inventory_text(ib_node(mlx5_3=healthy(3e-5, raw_ber=3e-5)))
    assert "Physical layer (mlxlink -c, since the counters' last clear; 9 ports)" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("mlx5_3:1"))
    assert "IB-NDR" in row and "3e-5" in row and "24.0 h" in row
    inventory = roce()
    inventory.port("mlx5_0:1").traffic_class_override = 106
    inventory.netdev("ens1f0np0").qos = QosConfig("dscp", (3,), "OS controlled", tuple(d >> 3 for d in range(64)))
    inventory.netdev("ens1f0np0").cnp_dscp = 48
    text = render_inventory_text(inventory)
    assert ("ens1f0np0 (mlx5_0:1): mlx5_0 tc/1/traffic_class 106 (overrides NCCL_IB_TC) → ToS 106 → DSCP 26 → "
            "priority 3; PFC on 3; CNPs DSCP 48 → priority 6") in text
    assert "ens2f0np0 (mlx5_1:1): NCCL's settings not read; PFC on 3" in text
    assert "RoCE PHY counters (ethtool -S, since the driver loaded)" in text


# -- the window: what makes a since-last-run interval trustworthy ------------------------------------

def test_a_clear_younger_than_the_interval_is_the_window_even_when_older_than_the_last_one() -> None:
    # The last run came 30 min after a clear; the counters were cleared again 19 h later and an hour
    # passed: 20,000 errors after FEC in that hour, not in the 20 h since the last run.
    before = ib_node(mlx5_2=healthy(since_clear_s=1800.0, raw_errors_per_lane=(0, 0, 0, 0)))
    after = ib_node(mlx5_2=healthy(since_clear_s=3600.0, effective_errors=20_000, effective_ber=1.4e-11,
                                   raw_errors_per_lane=(0, 0, 0, 0)))
    [finding] = run(after, history_of(before, elapsed_s=20 * 3600.0))["mlx5_2:1"]
    assert finding.status is Status.FAIL and "since the counters were last cleared (1.0 h ago)" in finding.summary


def test_without_the_port_rate_the_printed_window_is_used_and_named() -> None:
    before = ib_node()
    after = ib_node(mlx5_2=healthy(since_clear_s=DAY_S + 600, effective_errors=6000, effective_ber=2.5e-11))
    after.port("mlx5_2:1").rate = None
    [finding] = run(after, history_of(before))["mlx5_2:1"]
    assert finding.status is Status.FAIL and "since the counters were last cleared" in finding.summary


def test_a_window_too_short_for_a_ber_is_not_judged() -> None:
    just_cleared = healthy(since_clear_s=6.0, effective_errors=1, effective_ber=2e-10, raw_errors_per_lane=(1, 0))
    [finding] = run(ib_node(mlx5_2=just_cleared))["mlx5_2:1"]
    assert finding.status is Status.PASS and "too short a window" in finding.summary


def test_a_wrapped_32_bit_counter_costs_only_itself() -> None:
    before = roce(ens2f0np0={"link_down_events_phy": 2**32 - 2})
    after = roce(ens2f0np0={"link_down_events_phy": 3, "tx_pause_storm_error_events": 1})
    [finding] = by_subject(run_check(phy, CHECK, after, history=history_of(before)))["mlx5_1:1"]
    assert finding.status is Status.FAIL and "in the 10 min since the last run" in finding.summary


def test_each_slave_of_a_roce_lag_is_its_own_link() -> None:
    # mlxlink -d on the bond device reads its first PF; the second slave's BER comes from ethtool.
    inventory = roce()
    bond = inventory.netdev("ens1f0np0")
    bond.bond_slaves = ("ens1f0np0s0", "ens1f0np0s1")
    slaves = [dataclasses.replace(bond, name=name, bond_slaves=(), stats=dict(bond.stats or {}))
              for name in bond.bond_slaves]
    slaves[1].stats["rx_corrected_bits_phy"] = int(5e-4 * 400e9 * DAY_S)
    inventory.netdevs += slaves
    inventory.phy["mlx5_0:1"] = healthy(speed="400G", symbol_errors=None, symbol_ber=None)
    [finding] = by_subject(run_check(phy, CHECK, inventory))["mlx5_0:1"]
    assert finding.status is Status.FAIL and "RS-FEC (544,514)" in finding.summary
    assert set(finding.evidence["ethtool"]) == {"ens1f0np0s0", "ens1f0np0s1"}


def test_a_roce_link_flap_is_judged_here_once() -> None:
    before = roce()
    after = roce(ens2f0np0={"link_down_events_phy": 1})
    [finding] = by_subject(run_check(phy, CHECK, after, history=history_of(before)))["mlx5_1:1"]
    assert finding.status is Status.FAIL and finding.rule == "link_down_per_hour"     # 6/h over 10 min
    slow = by_subject(run_check(phy, CHECK, after, history=history_of(before, elapsed_s=6 * 3600.0)))["mlx5_1:1"]
    assert [f.status for f in slow] == [Status.WARN]
    # Where mlxlink read the port, its Link Down Counter is the same register: one finding, from it.
    before.phy["mlx5_1:1"] = healthy(speed="400G", symbol_errors=None, symbol_ber=None)
    after.phy["mlx5_1:1"] = healthy(speed="400G", symbol_errors=None, symbol_ber=None, since_clear_s=DAY_S + 600,
                                    link_down=1)
    [finding] = by_subject(run_check(phy, CHECK, after, history=history_of(before)))["mlx5_1:1"]
    assert finding.status is Status.FAIL and "the link of mlx5_1:1 went down 1 time(s)" in finding.summary


def test_the_ber_is_computed_from_the_counts_not_the_rounded_print() -> None:
    # 2.45e-4 over the window prints as 2E-4 (one digit): the counts say it is past the 2.4e-4 limit.
    lanes = tuple(int(2.45e-4 * LANE_BITS_PER_DAY) for _ in range(4))
    [finding] = run(ib_node(mlx5_3=healthy(raw_errors_per_lane=lanes, raw_ber=2e-4)))["mlx5_3:1"]
    assert finding.status is Status.FAIL and finding.evidence["pre_fec_ber"] == pytest.approx(2.45e-4)
