"""The fleet commands' settings from the rule pack (`[fleet-probe]`, `[fleet-drift]`,
`[fleet-rails]` of `rules/default.toml`; `--rules` or the default pack, site overrides
merged): thresholds live in packs, never in code."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from netdoctor.errors import RulesError
from netdoctor.fleet.probe_plan import Thresholds
from netdoctor.fleet.rails import RailThresholds


@dataclass(frozen=True)
class FleetSettings:
    probe: Thresholds
    sharp_expected: bool
    minimum_versions: Mapping[str, str]
    rails: RailThresholds


def fleet_settings(rules: str | None) -> FleetSettings:
    from netdoctor.packs import load_rules
    pack = load_rules(rules, None)
    probe, drift, rails = pack.section("fleet-probe"), pack.section("fleet-drift"), pack.section("fleet-rails")
    minimum = drift.get("minimum", {})
    if not isinstance(minimum, dict) or not all(isinstance(value, str) for value in minimum.values()):
        raise RulesError(f"rule pack {pack.name!r}: [fleet-drift] minimum must map kinds to version strings")
    return FleetSettings(
        probe=Thresholds(efficiency=float(probe["efficiency"]), pass_fraction=float(probe["pass_fraction"]),
                         warn_fraction=float(probe["warn_fraction"]), rail_fraction=float(probe["rail_fraction"])),
        sharp_expected=bool(probe["sharp_expected"]),
        minimum_versions=dict(minimum),
        rails=RailThresholds(min_majority=float(rails["min_majority"]), odd_fraction=float(rails["odd_fraction"])),
    )
