"""netdoctor.records.record behaves as dataclass(eq=True, repr=True) does, for every field count."""

from __future__ import annotations

import dataclasses
from dataclasses import field

import pytest

from netdoctor.records import record


@pytest.mark.parametrize("count", [0, 1, 2, 5])
@pytest.mark.parametrize("frozen", [True, False])
def test_eq_hash_and_repr_as_dataclass_writes_them(count: int, frozen: bool) -> None:
    names = [f"f{index}" for index in range(count)]
    namespace = {"__annotations__": dict.fromkeys(names, "int"), **dict.fromkeys(names, 0)}
    ours = record(type("Point", (), dict(namespace)), frozen=frozen)
    theirs = dataclasses.dataclass(type("Point", (), dict(namespace)), frozen=frozen)
    values = list(range(1, count + 1))
    for left, right in ((values, values), (values, [value + 1 for value in values])):
        assert (ours(*left) == ours(*right)) is (theirs(*left) == theirs(*right))
        assert (ours(*left) != ours(*right)) is (theirs(*left) != theirs(*right))
    assert repr(ours(*values)) == repr(theirs(*values))
    assert (ours.__hash__ is None) is (theirs.__hash__ is None)
    if frozen:
        assert hash(ours(*values)) == hash(theirs(*values)) == hash(tuple(values))
        with pytest.raises(dataclasses.FrozenInstanceError):
            ours(*values).f0 = 9
    assert ours(*values) != theirs(*values)          # another class: never equal, as dataclass says
    assert ours(*values).__eq__(object()) is NotImplemented
    assert dataclasses.is_dataclass(ours) and len(dataclasses.fields(ours)) == count


def test_field_settings_and_own_methods_are_kept() -> None:
    @record(frozen=True)
    class Row:
        name: str
        note: str = field(default="", compare=False, repr=False)
        weight: int = field(default=0, hash=False)

    assert Row("a", "x", 1) == Row("a", "y", 1) != Row("a", "x", 2)
    assert hash(Row("a", "x", 1)) == hash(Row("a", "x", 5)) == hash(("a",))
    assert repr(Row("a", "x", 1)) == "test_field_settings_and_own_methods_are_kept.<locals>.Row(name='a', weight=1)"
    assert dataclasses.replace(Row("a"), weight=3) == Row("a", weight=3)

    @record
    class Own:
        value: int

        def __eq__(self, other: object) -> bool:
            return True

        def __repr__(self) -> str:
            return "own"

    assert Own(1) == Own(2) and repr(Own(1)) == "own"


def test_a_record_inside_itself_is_shown_once() -> None:
    @record
    class Node:
        children: list

    node = Node([])
    node.children.append(node)
    assert repr(node).endswith("Node(children=[...])")


def test_a_frozen_record_with_its_own_eq_still_hashes_as_dataclass_decides() -> None:
    """Python sets `__hash__ = None` beside an `__eq__` a class defines; dataclass does not count
    that None as the class's own hash, and neither does record."""
    class Plain:
        x: int

        def __eq__(self, other: object) -> bool:
            return isinstance(other, type(self)) and other.x == self.x   # type: ignore[attr-defined]

    ours = record(type("Own", (Plain,), {"__annotations__": {"x": "int"}, "__eq__": Plain.__eq__}), frozen=True)
    theirs = dataclasses.dataclass(type("Own", (Plain,), {"__annotations__": {"x": "int"}, "__eq__": Plain.__eq__}),
                                   frozen=True)
    assert hash(ours(1)) == hash(theirs(1)) == hash((1,))
    unhashable = record(type("Unhashable", (), {"__annotations__": {"x": "int"}, "__hash__": None}), frozen=True)
    with pytest.raises(TypeError):
        hash(unhashable(1))
