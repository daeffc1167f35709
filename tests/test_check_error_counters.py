"""error-counters: growth as a rate since the last run, absolute level without history, saturation;
symbol_error and link_downed judged one way: a count in a window (since the last run, else since
boot) against ibqueryerrors' count and a rate."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from inventory_factory import (
    HDR,
    dgx_h100,
    history_of,
    only,
    port_of,
    roce_node,
    run_check,
    site_pack,
    sources,
)
from netdoctor_plugins.error_counters import error_counters

from netdoctor.inventory.model import PhysState, PortState, SourceState
from netdoctor.report.model import Status

CHECK = "error-counters"


def run(inventory, **kwargs):
    return run_check(error_counters, CHECK, inventory, **kwargs)


def grow(inventory, port: str, elapsed_s: float = 3600.0, **growth: int):
    """History `elapsed_s` ago in which `port`'s counters were lower by `growth`."""
    current = port_of(inventory, port)
    changes = {}
    for name, delta in growth.items():
        if name in current.counters:
            changes[name] = current.counters[name] - delta
        else:
            changes[f"hw_counters/{name}"] = current.hw_counters[name] - delta
    return history_of(inventory, elapsed_s=elapsed_s, changes={port: changes})


def test_clean_ports_pass_with_history_and_without() -> None:
    inventory = dgx_h100()
    with_history = only(run(inventory, history=history_of(inventory)), "mlx5_0:1")
    assert with_history.status is Status.PASS
    # 8 IB error counters + 5 hw counters (roce_adp_retrans is RoCE-only).
    assert with_history.summary == "no error growth beyond limits in 1.0 h (13 counters)"
    assert with_history.evidence["port_xmit_wait"] == 1204
    first_run = only(run(inventory), "mlx5_0:1")
    assert first_run.status is Status.PASS
    assert first_run.summary == ("error counters within absolute limits (there is no earlier reading; "
                                 "growth not judged)")


def test_symbol_errors_within_the_ber_limit_warn_past_ibqueryerrors_count_and_above_it_fail() -> None:
    inventory = dgx_h100()
    port_of(inventory, "mlx5_6:1").counters["symbol_error"] = 5000
    # 400 Gb/s x 1e-12 = 0.4 errors/s = 1440 per hour; ibqueryerrors' SymbolErrorCounter=10 is a count.
    assert only(run(inventory, history=grow(inventory, "mlx5_6:1", symbol_error=10)), "mlx5_6:1").status is Status.PASS
    within = only(run(inventory, history=grow(inventory, "mlx5_6:1", symbol_error=1400)), "mlx5_6:1")
    assert within.status is Status.WARN and within.rule == "symbol_error_absolute"
    assert within.summary.startswith("symbol_error rose by 1400 in 1.0 h (above 10; 1400/h; within BER 1e-12 at "
                                     "400 Gb/s allows 1440/h)")
    finding = only(run(inventory, history=grow(inventory, "mlx5_6:1", symbol_error=2000)), "mlx5_6:1")
    assert finding.status is Status.FAIL
    assert finding.summary.startswith("symbol_error rose by 2000 in 1.0 h (2000/h; BER 1e-12 at 400 Gb/s "
                                      "allows 1440/h)")
    assert finding.rule == "symbol_error_rate"
    assert finding.evidence["delta"] == 2000 and finding.evidence["allowed"] == 1440.0


def test_ber_allowance_scales_with_the_port_rate() -> None:
    inventory = dgx_h100()
    port = port_of(inventory, "mlx5_6:1")
    port.rate = HDR                       # 200 Gb/s: 720 per hour
    port.counters["symbol_error"] = 5000
    finding = only(run(inventory, history=grow(inventory, "mlx5_6:1", elapsed_s=600, symbol_error=5000 - 120)),
                   "mlx5_6:1")
    assert finding.status is Status.FAIL
    assert "in 10 min" in finding.summary and "BER 1e-12 at 200 Gb/s allows 720/h" in finding.summary
    assert finding.evidence["allowed"] == 120.0


def test_a_link_down_since_a_recent_run_fails_even_over_a_short_interval() -> None:
    inventory = dgx_h100()
    port_of(inventory, "mlx5_7:1").counters["link_downed"] = 3
    finding = only(run(inventory, history=grow(inventory, "mlx5_7:1", elapsed_s=30, link_downed=1)), "mlx5_7:1")
    assert finding.status is Status.FAIL
    assert finding.summary.startswith("link_downed rose by 1 in 30 s (120/h; limit 1/h)")
    assert finding.rule == "link_downed"
    assert finding.evidence == {"counter": "link_downed", "value": 3, "previous": 2, "delta": 1, "elapsed_s": 30.0,
                                "per_hour": 120.0, "allowed": 0.008, "error_growth": 1}
    # One link-down over a day since the last run is below 1/h: a warn, not a drain.
    slow = only(run(inventory, history=grow(inventory, "mlx5_7:1", elapsed_s=86400, link_downed=1)), "mlx5_7:1")
    assert slow.status is Status.WARN and slow.rule == "link_downed_absolute"


def test_absolute_level_without_history_warns() -> None:
    inventory = dgx_h100()
    port_of(inventory, "mlx5_5:1").counters["link_downed"] = 2
    finding = only(run(inventory), "mlx5_5:1")
    assert finding.status is Status.WARN
    assert finding.summary == ("link_downed is 2 (above 0), with no rate to judge (there is no earlier reading; "
                               "uptime unknown): times the link went down")
    assert finding.rule == "link_downed_absolute"


def test_saturated_counters_are_unknown_in_one_finding() -> None:
    inventory = dgx_h100()
    counters = port_of(inventory, "mlx5_2:1").counters
    counters["link_downed"], counters["symbol_error"] = 255, 65535
    finding = only(run(inventory), "mlx5_2:1")
    assert finding.status is Status.UNKNOWN
    assert finding.summary == ("counter saturated: symbol_error at 65535 (16-bit), link_downed at 255 (8-bit); "
                               "growth cannot be measured")
    assert "perfquery -x -R -C mlx5_2 -P 1" in (finding.remedy or "")
    # Still saturated since the last run: no growth can be seen, still unknown.
    again = only(run(inventory, history=history_of(inventory)), "mlx5_2:1")
    assert again.status is Status.UNKNOWN


def test_saturated_counter_whose_known_growth_already_breaches_fails() -> None:
    inventory = dgx_h100()
    port_of(inventory, "mlx5_2:1").counters["link_downed"] = 255
    findings = run(inventory, history=grow(inventory, "mlx5_2:1", link_downed=5))
    finding = only(findings, "mlx5_2:1")
    assert finding.status is Status.FAIL
    assert finding.summary.startswith("link_downed rose by at least 5 in 1.0 h")


def test_counter_that_went_down_is_judged_by_level_and_says_so() -> None:
    inventory = dgx_h100()
    port_of(inventory, "mlx5_1:1").counters["symbol_error"] = 3
    cleared = history_of(inventory, changes={"mlx5_1:1": {"symbol_error": 50}})
    finding = only(run(inventory, history=cleared), "mlx5_1:1")
    assert finding.status is Status.PASS
    assert finding.summary.endswith("symbol_error went down since the last run (50 -> 3: cleared?)")

    port_of(inventory, "mlx5_1:1").counters["symbol_error"] = 30
    finding = only(run(inventory, history=cleared), "mlx5_1:1")
    assert finding.status is Status.WARN
    assert finding.summary.startswith("symbol_error is 30 since it was cleared, within the 1.0 h since the last run "
                                      "(above 10; 30/h; within BER")
    assert finding.evidence["counter"] == "symbol_error"


def test_hw_counters_are_judged_by_growth_only() -> None:
    inventory = dgx_h100()
    port_of(inventory, "mlx5_0:1").hw_counters["local_ack_timeout_err"] = 5000
    assert only(run(inventory), "mlx5_0:1").status is Status.PASS        # no history: a lifetime count
    finding = only(run(inventory, history=grow(inventory, "mlx5_0:1", local_ack_timeout_err=100)), "mlx5_0:1")
    assert finding.status is Status.WARN
    assert finding.summary.startswith("local_ack_timeout_err rose by 100 in 1.0 h (100/h; limit 10/h)")
    assert finding.rule == "local_ack_timeout_err"


def test_roce_retransmissions_count_only_on_ethernet_ports() -> None:
    inventory = dgx_h100()
    port_of(inventory, "mlx5_0:1").hw_counters["roce_adp_retrans"] = 100000
    assert only(run(inventory, history=grow(inventory, "mlx5_0:1", roce_adp_retrans=99000)),
                "mlx5_0:1").status is Status.PASS
    roce = roce_node()
    port_of(roce, "mlx5_0:1").hw_counters["roce_adp_retrans"] = 100000
    finding = only(run(roce, history=grow(roce, "mlx5_0:1", roce_adp_retrans=99000)), "mlx5_0:1")
    assert finding.status is Status.WARN and finding.rule == "roce_adp_retrans"


def test_xmit_wait_is_evidence_unless_the_pack_judges_it() -> None:
    inventory = dgx_h100()
    port_of(inventory, "mlx5_0:1").counters["port_xmit_wait"] = 4_000_000_000
    history = grow(inventory, "mlx5_0:1", port_xmit_wait=3_600_000_000)
    finding = only(run(inventory, history=history), "mlx5_0:1")
    assert finding.status is Status.PASS
    assert finding.evidence["port_xmit_wait_per_second"] == 1_000_000.0
    judged = only(run(inventory, history=history,
                      overrides={"port_xmit_wait_judge": True, "port_xmit_wait_per_second": 10_000}), "mlx5_0:1")
    assert judged.status is Status.WARN and judged.rule == "port_xmit_wait"


def test_counters_without_a_pma_are_unknown() -> None:
    inventory = dgx_h100()
    port = port_of(inventory, "mlx5_3:1")
    port.counters = {name: None for name in port.counters}
    finding = only(run(inventory), "mlx5_3:1")
    assert finding.status is Status.UNKNOWN
    assert finding.summary == "error counters not available (N/A: the device has no PMA)"


def test_no_counters_names_the_sources() -> None:
    inventory = dgx_h100()
    port = port_of(inventory, "mlx5_3:1")
    port.counters, port.hw_counters = {}, {}
    inventory.sources.update(sources("perfquery-x-mlx5_3-1", state=SourceState.TIMEOUT, detail="after 4.0 s"))
    finding = only(run(inventory), "mlx5_3:1")
    assert finding.status is Status.UNKNOWN
    assert finding.summary == "no error counters: perfquery-x-mlx5_3-1 timed out: after 4.0 s"


def test_down_port_of_an_unused_class_is_skipped(tmp_path: Path) -> None:
    inventory = dgx_h100()
    port = port_of(inventory, "mlx5_7:1")
    port.state, port.phys_state = PortState.DOWN, PhysState.DISABLED
    port.counters["link_downed"] = 7
    pack = site_pack(tmp_path, "dgx-h100", '[port-classes.spare]\nhca_names = ["mlx5_7"]\nrole = "unused"\n')
    finding = only(run(inventory, rule_pack=pack), "mlx5_7:1")
    assert finding.status is Status.SKIP


def test_rule_names_key_shadow_mode(tmp_path: Path) -> None:
    inventory = dgx_h100()
    port_of(inventory, "mlx5_6:1").counters["symbol_error"] = 9000
    pack = site_pack(tmp_path, "dgx-h100", '[grade]\nshadow = ["error-counters.symbol_error_rate"]\n')
    finding = only(run(inventory, rule_pack=pack, history=grow(inventory, "mlx5_6:1", symbol_error=9000)),
                   "mlx5_6:1")
    assert finding.status is Status.FAIL
    assert pack.is_shadow(CHECK, finding.rule)


def test_virtual_function_is_skipped_through_its_physical_function() -> None:
    inventory = dgx_h100(storage=None)
    vf = copy.deepcopy(inventory.hca("mlx5_0"))
    vf.name, vf.pci_address, vf.physical_function = "mlx5_12", "0000:1a:00.1", inventory.hca("mlx5_0").pci_address
    vf.ports[1].hca = "mlx5_12"
    vf.ports[1].counters["link_downed"] = 7       # would warn on its own
    inventory.hcas.append(vf)
    finding = only(run(inventory), "mlx5_12:1")
    assert finding.status is Status.SKIP
    assert finding.summary == "SR-IOV virtual function of 0000:1a:00.0 (mlx5_0): judged through its physical function"
    assert only(run(inventory), "mlx5_0:1").status is Status.PASS


def test_history_older_than_the_limit_is_not_used_for_rates() -> None:
    """5,000 symbol errors over 30 days is within BER as a rate, but may be last hour's burst."""
    inventory = dgx_h100()
    port_of(inventory, "mlx5_6:1").counters["symbol_error"] = 5120
    finding = only(run(inventory, history=grow(inventory, "mlx5_6:1", elapsed_s=30 * 86400, symbol_error=5000)),
                   "mlx5_6:1")
    assert finding.status is Status.WARN and finding.rule == "symbol_error_absolute"
    assert "old (history_max_age_s 86400)" in finding.summary


# -- symbol_error and link_downed: one judgement, with or without history --------------------------------

DAY = 86400.0


@pytest.mark.parametrize(("counter", "count", "window_s", "status", "rule"), [
    ("symbol_error", 10, 600.0, Status.PASS, None),                          # ibqueryerrors' count: never judged
    ("symbol_error", 120, DAY, Status.WARN, "symbol_error_absolute"),        # past 10, far within the BER
    ("symbol_error", 5000, 600.0, Status.FAIL, "symbol_error_rate"),         # 30,000/h against 1440/h
    ("symbol_error", 40000, DAY, Status.FAIL, "symbol_error_rate"),          # 1667/h over a day
    ("link_downed", 0, DAY, Status.PASS, None),
    ("link_downed", 2, DAY, Status.WARN, "link_downed_absolute"),            # went down, but not once an hour
    ("link_downed", 1, 600.0, Status.FAIL, "link_downed"),                   # 6/h
    ("link_downed", 3, 3600.0, Status.FAIL, "link_downed"),
])
def test_the_same_count_in_the_same_window_gets_one_verdict_with_or_without_history(
        counter: str, count: int, window_s: float, status: Status, rule: str | None) -> None:
    since_boot = dgx_h100()
    since_boot.uptime_s = window_s                                           # first run: the window is the uptime
    port_of(since_boot, "mlx5_6:1").counters[counter] = count
    first = only(run(since_boot), "mlx5_6:1")
    with_history = dgx_h100()
    with_history.uptime_s = 30 * DAY
    port_of(with_history, "mlx5_6:1").counters[counter] = count + 7          # 7 before the last run
    grown = only(run(with_history, history=grow(with_history, "mlx5_6:1", elapsed_s=window_s, **{counter: count})),
                 "mlx5_6:1")
    assert (first.status, first.rule) == (status, rule)
    assert (grown.status, grown.rule) == (status, rule)
    if status is not Status.PASS:
        assert first.summary.startswith(f"{counter} is {count} since boot ")
        assert grown.summary.startswith(f"{counter} rose by {count} in ")


def test_first_run_judges_the_count_as_a_rate_over_the_uptime() -> None:
    inventory = dgx_h100()
    inventory.uptime_s = 93784.0                                             # 26 h
    port_of(inventory, "mlx5_6:1").counters["symbol_error"] = 5120
    finding = only(run(inventory), "mlx5_6:1")
    assert finding.status is Status.WARN
    assert finding.summary == ("symbol_error is 5120 since boot 26.1 h ago (above 10; 197/h; within BER 1e-12 at "
                               "400 Gb/s allows 1440/h); there is no earlier reading: symbol errors on the wire "
                               "(with FEC: errors FEC could not correct)")
    assert finding.evidence["uptime_s"] == 93784.0
    inventory.uptime_s = 1800.0                                              # the same count 30 min after boot
    fast = only(run(inventory), "mlx5_6:1")
    assert fast.status is Status.FAIL and fast.rule == "symbol_error_rate"
    assert fast.summary.startswith("symbol_error is 5120 since boot 30 min ago (10240/h; BER 1e-12 at 400 Gb/s "
                                   "allows 1440/h)")


def test_stale_history_falls_back_to_the_window_since_boot() -> None:
    inventory = dgx_h100()
    inventory.uptime_s = 40 * DAY
    port_of(inventory, "mlx5_6:1").counters["link_downed"] = 2
    finding = only(run(inventory, history=grow(inventory, "mlx5_6:1", elapsed_s=30 * DAY, link_downed=1)), "mlx5_6:1")
    assert finding.status is Status.WARN and finding.rule == "link_downed_absolute"
    assert "since boot 960.0 h ago" in finding.summary and "history_max_age_s 86400" in finding.summary


def test_a_saturated_count_since_boot_stays_unknown_whatever_the_uptime() -> None:
    inventory = dgx_h100()
    inventory.uptime_s = 600.0           # 255 link-downs in 10 min would fail as a rate, but a stuck count has no "when"
    port_of(inventory, "mlx5_2:1").counters["link_downed"] = 255
    finding = only(run(inventory), "mlx5_2:1")
    assert finding.status is Status.UNKNOWN and "link_downed at 255 (8-bit)" in finding.summary


def test_a_down_port_has_no_ber_rate_and_warns_past_the_count() -> None:
    inventory = dgx_h100()
    inventory.uptime_s = 600.0
    port = port_of(inventory, "mlx5_6:1")
    port.state, port.phys_state = PortState.DOWN, PhysState.POLLING
    port.counters["symbol_error"] = 5000
    finding = only(run(inventory), "mlx5_6:1")
    assert finding.status is Status.WARN and finding.rule == "symbol_error_absolute"
    assert "the port is not active, so the BER limit has no rate to apply to" in finding.summary
