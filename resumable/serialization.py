"""JSON encoding of everything stored: state, inputs, results, tool requests.

Stored values must round-trip through JSON exactly, so anything that json
cannot encode (objects, sets, NaN), and text PostgreSQL cannot store (NUL,
a lone surrogate), is refused up front, before any write, with an error that
names where the bad value sits. (Left to the database, a tool result holding
a NUL failed the step's commit itself, again on every recovery.)
"""

from __future__ import annotations

import json
import math
from typing import Any

from resumable.errors import NotSerializableError


def unstorable_text(text: str) -> str | None:
    """Why PostgreSQL could not store `text` (in ``jsonb`` or ``text``), or None."""
    if "\x00" in text:
        return "NUL (\\u0000), which PostgreSQL cannot store"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            code = ord(text[exc.start])
            return f"a lone surrogate (\\u{code:04x}), which is not valid Unicode"
    return None


def find_bad_value(value: Any, path: str) -> str | None:
    """The path of the first value JSON or PostgreSQL cannot hold, for the error message."""
    if isinstance(value, str):
        problem = unstorable_text(value)
        return f"{path} (contains {problem})" if problem else None
    if value is None or isinstance(value, bool | int):
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
            problem = unstorable_text(key)
            if problem:
                return f"{path} (a key contains {problem})"
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
