"""Maps plugin names to factories; a name can be registered once."""

from __future__ import annotations

from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._factories: dict[str, Callable[[], T]] = {}

    def register(self, name: str, factory: Callable[[], T]) -> None:
        if name in self._factories:
            raise ValueError(f"{self.kind} plugin {name!r} is already registered")
        self._factories[name] = factory

    def create(self, name: str) -> T:
        try:
            return self._factories[name]()
        except KeyError:
            known = ", ".join(sorted(self._factories))
            raise ValueError(f"unknown {self.kind} plugin {name!r} (known: {known})") from None

    def names(self) -> list[str]:
        return sorted(self._factories)
