"""The fleet commands' settings from the rule pack (`[fleet-probe]`, `[fleet-drift]`,
`[fleet-rails]` of `rules/default.toml`; `--rules` or the default pack, site overrides
merged): thresholds live in packs, never in code."""

from __future__ import annotations

from collections.abc import Mapping

from netdoctor.errors import RulesError
from netdoctor.fleet.probe_plan import Thresholds
from netdoctor.fleet.rails import RailThresholds
from netdoctor.records import record


@record(frozen=True)
class FleetSettings:
    probe: Thresholds
    sharp_expected: bool
    minimum_versions: Mapping[str, str]
    rails: RailThresholds


def fleet_settings(rules: str | None) -> FleetSettings:
    from netdoctor.packs import load_rules
    pack = load_rules(rules, None)
    probe, drift, rails = pack.section("fleet-probe"), pack.section("fleet-drift"), pack.section("fleet-rails")

    def share(table: str, values: Mapping[str, object], key: str, top: float = 1.0) -> float:
        value = values.get(key)
        if value.__class__ not in (int, float) or not 0 < value <= top:   # type: ignore[operator]
            raise RulesError(f"rule pack {pack.name!r}: [{table}] {key} must be a number in (0, {top:g}], not {value!r}")
        return float(value)   # type: ignore[arg-type]

    minimum = drift.get("minimum", {})
    if not isinstance(minimum, dict) or not all(isinstance(value, str) for value in minimum.values()):
        raise RulesError(f"rule pack {pack.name!r}: [fleet-drift] minimum must map kinds to version strings")
    expected = probe.get("expected_busbw_gbps")
    if expected.__class__ not in (int, float) or not 0 <= expected < 1e6:   # type: ignore[operator]
        raise RulesError(f"rule pack {pack.name!r}: [fleet-probe] expected_busbw_gbps must be a number of GB/s "
                         f"(0: from the fleet's majority), not {expected!r}")
    sharp = probe.get("sharp_expected")
    if not isinstance(sharp, bool):
        raise RulesError(f"rule pack {pack.name!r}: [fleet-probe] sharp_expected must be true or false, not {sharp!r}")
    return FleetSettings(
        probe=Thresholds(efficiency=share("fleet-probe", probe, "efficiency", 1.5),
                         pass_fraction=share("fleet-probe", probe, "pass_fraction"),
                         warn_fraction=share("fleet-probe", probe, "warn_fraction"),
                         rail_fraction=share("fleet-probe", probe, "rail_fraction"),
                         expected_busbw_gbps=float(expected)),   # type: ignore[arg-type]
        sharp_expected=sharp,
        minimum_versions=dict(minimum),
        rails=RailThresholds(min_majority=share("fleet-rails", rails, "min_majority"),
                             odd_fraction=share("fleet-rails", rails, "odd_fraction")),
    )
