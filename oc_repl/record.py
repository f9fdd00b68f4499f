"""One base for the plain record types (events, and the shapes that cross the seams): `repr` and `==` written once.

dataclass would compile both for every type at import, a few milliseconds of every one-shot run's start-up; these
compare and show the same fields in the same order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any


class Record:
    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]  # mutable, as a dataclass with eq is

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))  # type: ignore[arg-type]

    def __repr__(self) -> str:
        fields = dataclasses.fields(self)  # type: ignore[arg-type]
        return f"{type(self).__qualname__}({', '.join(f'{f.name}={getattr(self, f.name)!r}' for f in fields)})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]


def record(**options: Any) -> Callable[[type], type]:
    """dataclass(**options) for a subclass of Record, which brings its own repr and ==."""
    return dataclasses.dataclass(repr=False, eq=False, **options)
