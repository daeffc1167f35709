"""The fuzz suite (test_parsers_fuzz.py) really covers every parser, with the examples it claims.

New parsers get added over time; this test fails the day one is added without a fuzz
property, and checks that NETDOCTOR_FUZZ_EXAMPLES (2,000 under CI, scripts/test.sh)
is the number of examples hypothesis actually runs per property.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import netdoctor.parsers
import test_parsers_fuzz as fuzz
from netdoctor.host.sources import SOURCES
from netdoctor.inventory.from_tools import parser_of

# Public parse_* functions that do not take tool output text. Anything put here must say
# why it needs no property of its own.
_FIELD_HELPER = "a field helper (source, value, line) the tool parsers call; fuzzed through them"
NOT_TEXT_PARSERS: dict[str, str] = {
    "parse_decimal": _FIELD_HELPER,
    "parse_hex": _FIELD_HELPER,
    "parse_number": _FIELD_HELPER,
}
# Parsers of bytes, not text: each has its own property test over arbitrary bytes.
BINARY_PARSERS: dict[str, str] = {
    "parse_pci_config": "tests/test_parsers_pci.py::test_config_space_parser_takes_any_bytes",
    "parse_pci_vpd": "tests/test_parsers_vpd.py::test_vpd_parser_takes_any_bytes",
}


def _public_parsers() -> dict[str, Callable[..., Any]]:
    found: dict[str, Callable[..., Any]] = {}
    for info in pkgutil.iter_modules(netdoctor.parsers.__path__):
        module = importlib.import_module(f"netdoctor.parsers.{info.name}")
        for name, value in vars(module).items():
            if name.startswith("parse_") and inspect.isfunction(value) and value.__module__ == module.__name__:
                found[f"{info.name}.{name}"] = value
    return found


def test_every_parser_has_a_fuzz_property() -> None:
    parsers = _public_parsers()
    assert len(parsers) >= 20
    for name in NOT_TEXT_PARSERS:                       # the exemptions really are not text parsers
        helper = next(function for key, function in parsers.items() if key.endswith("." + name))
        assert list(inspect.signature(helper).parameters)[:2] == ["source", "value"]
    assert any(key.startswith("nccl.") for key in parsers)
    for name in BINARY_PARSERS:
        parser = next(function for key, function in parsers.items() if key.endswith("." + name))
        assert next(iter(inspect.signature(parser).parameters.values())).annotation in ("bytes", bytes)
    fuzzed = {parser for parser, _ in fuzz.PARSERS.values()} | set(fuzz.VALUE_PARSERS)
    missing = sorted(key for key, function in parsers.items() if function not in fuzzed
                     and key.rsplit(".", 1)[1] not in NOT_TEXT_PARSERS and key.rsplit(".", 1)[1] not in BINARY_PARSERS)
    assert missing == []


def test_every_tool_parser_is_fuzzed_from_real_corpus_samples() -> None:
    without_samples = sorted(name for name, (_, samples) in fuzz.PARSERS.items() if not samples)
    assert without_samples == []


def test_every_parser_the_inventory_uses_is_fuzzed() -> None:
    fuzzed = {parser for parser, _ in fuzz.PARSERS.values()}
    rows = [row for row in SOURCES if row.is_command]
    assert len(rows) >= 7
    for row in rows:
        assert parser_of(row) in fuzzed, row.name


def test_fuzz_examples_setting_is_honoured() -> None:
    wanted = int(os.environ.get("NETDOCTOR_FUZZ_EXAMPLES", "200"))
    assert fuzz.FUZZ.max_examples == wanted
    calls = 0
    samples = fuzz.PARSERS["ibstat"][1]

    # The same settings and strategy the mutated-corpus property uses; hypothesis must
    # not stop early (it would if the strategy's space were exhausted).
    @fuzz.FUZZ
    @given(text=st.one_of(fuzz._ANY_TEXT, fuzz._mutated(samples)))
    def count(text: str) -> None:
        nonlocal calls
        calls += 1

    count()
    assert calls >= wanted
