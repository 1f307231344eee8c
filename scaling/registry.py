"""One registry class for every kind of plug-in: workloads, frameworks, launchers, backends.

A plug-in registers itself under its name once; a lookup of an unknown name is a one-line error
that names the valid choices.
"""

from __future__ import annotations

from typing import Callable, Dict, Generic, Iterator, List, TypeVar

from scaling.errors import ScalingError

T = TypeVar("T")


class Registry(Generic[T]):
    """Plug-ins of one kind by name."""

    def __init__(self, kind: str, error: Callable[[str], Exception] = ScalingError):
        self.kind = kind
        self.error = error
        self._items: Dict[str, T] = {}

    def register(self, name: str, item: T) -> T:
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._items[name] = item
        return item

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise self.error(f"unknown {self.kind} {name!r}; valid {self.kind}s: "
                             f"{', '.join(self.names())}") from None

    def names(self) -> List[str]:
        return sorted(self._items)

    def items(self):
        return self._items.items()

    def values(self):
        return self._items.values()

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __getitem__(self, name: str) -> T:
        return self._items[name]

    def __delitem__(self, name: str) -> None:
        del self._items[name]

    def __len__(self) -> int:
        return len(self._items)
