"""`record`: a dataclass whose `__eq__`, `__hash__` and `__repr__` are shared, not generated.

The standard library's `dataclass` compiles every method it writes, for every class, at import:
six small functions for a frozen class, ~0.6 ms of a 2-core VM on Python 3.10-3.12 (3.13
compiles them in one go). netdoctor has ~150 value types, and every command imports most
of them: generating `__eq__`, `__hash__` and `__repr__` was ~60 ms of a 0.3 s snapshot `check`
(benchmarks/results/check.md). `record` lets `dataclass` write `__init__` (and a frozen
class's `__setattr__` / `__delattr__`) and gives the class these three, which behave as the
generated ones do:

- `__eq__`: the same class (exactly), and equal fields of `compare=True`, in order;
  NotImplemented otherwise;
- `__hash__`: frozen classes hash those fields (a field's `hash=` setting as dataclass reads
  it); mutable ones are unhashable (`__hash__ = None`), as with `eq=True`;
- `__repr__`: `QualifiedName(field=value!r, ...)` over the fields of `repr=True`, `...` for
  a record met again inside itself.

A method the class defines itself is kept, as `dataclass` keeps it. `dataclasses.fields`,
`replace`, `asdict` and `is_dataclass` work as on any dataclass.
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar, overload

T = TypeVar("T")


@overload
def record(cls: type[T], /) -> type[T]: ...
@overload
def record(*, frozen: bool = ..., slots: bool = ...) -> Callable[[type[T]], type[T]]: ...


def record(cls: type[T] | None = None, /, *, frozen: bool = False, slots: bool = False) -> Any:
    """`@record`, `@record(frozen=True)`, `@record(frozen=True, slots=True)`: see the module."""
    def wrap(klass: type[T]) -> type[T]:
        own = set(klass.__dict__)
        made = dataclasses.dataclass(klass, frozen=frozen, slots=slots, eq=False, repr=False)
        fields = dataclasses.fields(made)
        compared = _getter([field.name for field in fields if field.compare])
        made.__record_compared__ = compared     # type: ignore[attr-defined]
        if "__eq__" not in own:
            made.__eq__ = _eq                   # type: ignore[assignment,method-assign]
        # As dataclass decides: a class's own __hash__ counts unless it is the None that Python
        # sets beside an __eq__ the class defines.
        explicit_hash = "__hash__" in own and not (klass.__dict__["__hash__"] is None and "__eq__" in own)
        if not explicit_hash:
            hashed = _getter([field.name for field in fields
                              if (field.compare if field.hash is None else field.hash)])
            made.__record_hashed__ = hashed     # type: ignore[attr-defined]
            made.__hash__ = _hash if frozen else None   # type: ignore[assignment,method-assign]
        if "__repr__" not in own:
            made.__record_shown__ = tuple(field.name for field in fields if field.repr)  # type: ignore[attr-defined]
            made.__repr__ = _repr                # type: ignore[assignment,method-assign]
        return made

    return wrap if cls is None else wrap(cls)


def _getter(names: list[str]) -> staticmethod:
    """The named fields of an instance, always as a tuple (attrgetter of one name is not); a
    staticmethod, so that a class attribute holding it is not bound to the instance."""
    if not names:
        return staticmethod(lambda instance: ())
    if len(names) == 1:
        single = attrgetter(names[0])
        return staticmethod(lambda instance: (single(instance),))
    return staticmethod(attrgetter(*names))


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is self.__class__:
        compared = self.__record_compared__
        return compared(self) == compared(other)
    return NotImplemented


def _hash(self: Any) -> int:
    return hash(self.__record_hashed__(self))


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__record_shown__)
    return f"{self.__class__.__qualname__}({shown})"
