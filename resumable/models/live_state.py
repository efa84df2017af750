"""The live state as `sessions.state` plus `sessions.state_patch`, and the
exact diff that lets an incremental step write only what it changed.

A 1 MB state rewritten on the session row after every step costs a full JSON
encoding, a full validation walk, PostgreSQL's parse and compression, and
~500 KB of WAL (PostgreSQL rewrites a whole TOASTed value when it changes).
Instead, an incremental step appends the JSON Patch of its change to
`state_patch`; PostgreSQL keeps the unchanged `state` value where it is. The
patch is folded back (the step writes `state` whole, `state_patch` NULL) at
each history snapshot, when it grows past a fraction of the state, and when
the session completes. Every reader sees `state` with the patch applied, by
``apply`` below and nowhere else: the claim (``step_queries.ClaimedSession``)
and every other read of a session row (``session_queries.SessionRecord`` rows,
through ``session_queries.live_row``).

The diff compares the step's state against a private copy of the previous
one whose numbers and booleans compare exactly (Python holds ``1 == 1.0 ==
True``, JSON does not), so an unchanged subtree is skipped by C-level
equality and everything that changed, and nothing else, is validated,
redacted and encoded.
"""

from __future__ import annotations

import json
from typing import Any

from resumable._internal import serialization
from resumable.checkpoints import apply_patch
from resumable.errors import NotSerializableError


class _ExactInt(int):
    """An int of the private copy: equal only to an int (not a bool, not a float)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, int) and not isinstance(other, bool) and int.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = int.__hash__


class _ExactFloat(float):
    """A float of the private copy: equal only to a float."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, float) and float.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = float.__hash__


class _ExactBool:
    """A boolean of the private copy (bool cannot be subclassed): equal only
    to the same bool."""

    __slots__ = ("value",)

    def __init__(self, value: bool) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return other is self.value

    def __ne__(self, other: object) -> bool:
        return other is not self.value

    def __hash__(self) -> int:
        return hash(self.value)


_TRUE, _FALSE = _ExactBool(True), _ExactBool(False)


def _exact_list(items: list[Any]) -> list[Any]:
    for index, item in enumerate(items):
        if item is True or item is False:
            items[index] = _TRUE if item else _FALSE
        elif type(item) is list:
            _exact_list(item)
    return items


def _exact_object(obj: dict[str, Any]) -> dict[str, Any]:
    for key, item in obj.items():
        if item is True or item is False:
            obj[key] = _TRUE if item else _FALSE
        elif type(item) is list:
            _exact_list(item)
    return obj


def exact_copy(encoded: str) -> Any:
    """A private copy of JSON text whose scalars compare exactly (for `diff`)."""
    value = json.loads(
        encoded, parse_int=_ExactInt, parse_float=_ExactFloat, object_hook=_exact_object
    )
    if value is True or value is False:
        return _TRUE if value else _FALSE
    if type(value) is list:
        _exact_list(value)
    return value


class _NotJsonError(Exception):
    """The new state holds something JSON cannot (a non-string key)."""


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def diff(old: Any, new: Any) -> list[dict[str, Any]]:
    """The RFC 6902 patch turning `old` (an `exact_copy`) into `new`, whose
    values are validated: NotSerializableError (naming the first bad value of
    the whole state, as ``serialization.dumps`` does) when `new` holds
    something JSON cannot hold."""
    ops: list[dict[str, Any]] = []
    try:
        _diff(old, new, "", ops)
        for op in ops:
            # The value sits as deep as its path says: nested within the limit
            # counted from the top of the whole state, not of the value.
            depth = op["path"].count("/") + 1
            if "value" in op and serialization.find_bad_value(op["value"], "state", depth):
                raise _NotJsonError
    except _NotJsonError:
        serialization.dumps(new, "state")  # raises, naming the bad value
        raise NotSerializableError("state is not JSON-serializable") from None
    return ops


def _diff(old: Any, new: Any, path: str, ops: list[dict[str, Any]]) -> None:
    # `old` on the left: its exact scalars decide, also deep inside C's compare.
    if old == new:
        return
    if type(old) is dict and isinstance(new, dict):
        for key in old:
            if key not in new:
                ops.append({"op": "remove", "path": f"{path}/{_escape(key)}"})
        for key, value in new.items():
            if not isinstance(key, str):
                raise _NotJsonError
            child = f"{path}/{_escape(key)}"
            if key in old:
                _diff(old[key], value, child, ops)
            else:
                ops.append({"op": "add", "path": child, "value": value})
        return
    if type(old) is list and isinstance(new, list):
        common = min(len(old), len(new))
        for index, (old_item, new_item) in enumerate(zip(old, new, strict=False)):
            if not old_item == new_item:  # noqa: SIM201 (the old item's __eq__ decides)
                _diff(old_item, new_item, f"{path}/{index}", ops)
        ops.extend({"op": "add", "path": f"{path}/-", "value": v} for v in new[common:])
        ops.extend(
            {"op": "remove", "path": f"{path}/{i}"} for i in range(len(old) - 1, common - 1, -1)
        )
        return
    ops.append({"op": "replace", "path": path, "value": new})


def apply(state: dict[str, Any], patch: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The live state: `state` with `patch` applied (in place)."""
    if not patch:
        return state
    result: dict[str, Any] = apply_patch(state, patch)
    return result
