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
import sys
import traceback
from decimal import Decimal
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


def storable_text(text: str) -> str:
    """`text` with what PostgreSQL cannot store (NUL, lone surrogates) written
    out as escapes: for text we record but did not choose, such as an
    exception's message, where refusing would lose the failure itself."""
    if unstorable_text(text) is None:
        return text
    return text.replace("\x00", "\\u0000").encode("utf-8", "backslashreplace").decode("utf-8")


def exception_text(exc: BaseException) -> str:
    """``str(exc)``, storable, even for an exception whose ``__str__`` raises
    (a step's exception is user code; recording it must not fail)."""
    try:
        text = str(exc)
    except Exception:
        text = f"<{storable_text(type(exc).__name__)} whose str() raised>"
    return storable_text(text)


def traceback_text(exc: BaseException) -> str:
    """The formatted traceback of `exc`, storable (see `exception_text`)."""
    try:
        text = "".join(traceback.format_exception(exc))
    except Exception:
        text = f"<the traceback of a {type(exc).__name__} could not be formatted>"
    return storable_text(text)


def read_float(text: str) -> float:
    """A JSON number with a fraction or exponent, for ``json.loads(parse_float=)``:
    ValueError for one too small to be told from 0 (``1e-400`` reads as 0.0,
    which is not the number sent), as 1e400 is too large for a float."""
    number = float(text)
    mantissa = text.lower().partition("e")[0]
    if number == 0.0 and any(digit in "123456789" for digit in mantissa):
        raise ValueError(f"the number {text[:40]} is too small for a float (it would read as 0)")
    return number


#: The deepest nesting stored, as the HTTP API takes it (and far below where
#: Python's recursion, or pydantic's when a response holds the value, gives up).
MAX_DEPTH = 100


def find_bad_value(value: Any, path: str, depth: int = 1) -> str | None:
    """The path of the first value JSON or PostgreSQL cannot hold, for the error
    message. `depth`: the nesting level `value` sits at (1: the top)."""
    if isinstance(value, str):
        problem = unstorable_text(value)
        return f"{path} (contains {problem})" if problem else None
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return _too_long(value, path)
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{path} (non-finite float {value!r})"
    if isinstance(value, list | tuple | dict) and depth > MAX_DEPTH:
        return f"{path} (nested deeper than {MAX_DEPTH} levels)"
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = find_bad_value(item, f"{path}[{index}]", depth + 1)
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
            found = find_bad_value(item, f"{path}.{key}", depth + 1)
            if found:
                return found
        return None
    return f"{path} ({type(value).__name__})"


# PostgreSQL's numeric (what jsonb stores numbers as) holds up to 131,072
# digits before the decimal point.
_NUMERIC_DIGITS = 131_072


def _too_long(value: int, path: str) -> str | None:
    """An integer too long for json to write (Python's int-to-text limit,
    4,300 digits by default; 0: none) or for PostgreSQL's numeric to hold."""
    if value.bit_length() < 10_000:  # at most 3,011 digits: fine either way
        return None
    limit = min(sys.get_int_max_str_digits() or _NUMERIC_DIGITS, _NUMERIC_DIGITS)
    if abs(value) < 10**limit:
        return None
    return f"{path} (an integer of more than {limit} digits)"


def _encode(value: Any, what: str, **options: Any) -> str:
    try:
        bad = find_bad_value(value, what)
    except RecursionError:
        bad = f"{what} (nested too deeply)"
    if bad is not None:
        raise NotSerializableError(f"{what} is not JSON-serializable at {bad}")
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), **options)
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # What the walk above lets through and json still refuses: raised as
        # the permanent error it is, so a step (or a tool call whose result
        # this is) is not retried for it.
        raise NotSerializableError(f"{what} is not JSON-serializable: {exc}") from None


def dumps(value: Any, what: str = "value") -> str:
    """Encode for storage; raise NotSerializableError naming the offending part.

    The walk before encoding catches what json would silently change (an int
    key becomes a string, a tuple a list is fine), so that a state read back
    after a crash is exactly the state the step left.
    """
    return _encode(value, what)


def canonical(value: Any, what: str = "value") -> str:
    """Deterministic encoding (sorted keys), used to derive idempotency keys
    and to tell a repeated request from another one.

    Numbers are written as PostgreSQL gives them back, so a value and the same
    value read from the database encode alike: a float of 1e16 or more (always
    integral) comes back from ``jsonb`` as an int, and -0.0 as 0.0. Without
    this a tool call made with ``1e20`` got another key once a recovered worker
    re-ran the step from the stored state (``100000000000000000000``): the
    session was blocked as diverged and accepting it repeated the call.
    """
    try:
        stored = as_stored(value)
    except RecursionError:
        stored = value  # the walk in _encode reports it
    return _encode(stored, what, sort_keys=True)


#: From here on a float's repr has an exponent, and ``jsonb`` (numeric)
#: reads such a number back as an integer.
_INTEGRAL_FLOATS = 1e16


def as_stored(value: Any) -> Any:
    """`value` with its floats as they come back from ``jsonb``: -0.0 as 0.0 and
    a float of magnitude 1e16 or more as the integer its JSON text spells
    (``1.2345678901234568e+17`` is 123456789012345680, not the float's exact
    binary value). Returns `value` itself when nothing changes."""
    if isinstance(value, float):
        if value == 0.0:
            return 0.0
        if math.isfinite(value) and abs(value) >= _INTEGRAL_FLOATS:
            return int(Decimal(repr(value)))
        return value
    if isinstance(value, list | tuple):
        items = [as_stored(item) for item in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if isinstance(value, dict):
        changed = {key: as_stored(item) for key, item in value.items()}
        if all(changed[key] is item for key, item in value.items()):
            return value
        return changed
    return value
