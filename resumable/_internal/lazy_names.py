"""A package's public names resolved on first use (PEP 562): the package
root and ``resumable.models`` import nothing heavy until a name is asked for,
so a process that never uses a name never pays for its module."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def resolver(
    package: str, homes: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The package's ``__getattr__`` and ``__dir__``: each name in `homes`
    (name -> the module defining it) is imported once and then kept in the
    package's `namespace`, so the next lookup is a plain attribute."""

    def get(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        namespace[name] = value
        return value

    def listing() -> list[str]:
        return sorted(set(namespace) | set(homes))

    return get, listing
