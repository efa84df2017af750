"""JSON encoding of everything stored: state, inputs, results, tool requests.

Stored values must round-trip through JSON exactly, so anything that json
cannot encode (objects, sets, NaN) is refused up front, before any write,
with an error that names where the bad value sits.
"""

from __future__ import annotations

import json
import math
from typing import Any

from resumable.errors import NotSerializableError


def find_bad_value(value: Any, path: str) -> str | None:
    """The path of the first value JSON cannot hold, for the error message."""
    if value is None or isinstance(value, bool | int | str):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{path} (non-finite float {value!r})"
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = find_bad_value(item, f"{path}[{index}]")
            if found:
                return found
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path} (key {key!r} is not a string)"
            found = find_bad_value(item, f"{path}.{key}")
            if found:
                return found
        return None
    return f"{path} ({type(value).__name__})"


def dumps(value: Any, what: str = "value") -> str:
    """Encode for storage; raise NotSerializableError naming the offending part.

    The walk before encoding catches what json would silently change (an int
    key becomes a string, a tuple a list is fine), so that a state read back
    after a crash is exactly the state the step left.
    """
    bad = find_bad_value(value, what)
    if bad is not None:
        raise NotSerializableError(f"{what} is not JSON-serializable at {bad}")
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def canonical(value: Any, what: str = "value") -> str:
    """Deterministic encoding (sorted keys), used to derive idempotency keys."""
    bad = find_bad_value(value, what)
    if bad is not None:
        raise NotSerializableError(f"{what} is not JSON-serializable at {bad}")
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
