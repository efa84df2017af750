"""Applying an operator's RFC 6902 JSON Patch to a session's state (a dead
letter's retry, a fork), with one clear error for every way it can be wrong.

A patch is small (an HTTP body, a CLI option), but what it makes need not be:
each ``copy`` duplicates a part of the state, so twenty of them that copy a
value into itself make a state a million times larger, and nesting values
into one another passes any depth limit the request itself kept to. The
patched state must be storable (``serialization``: at most 100 levels deep,
no NUL...), and copies may add at most ``MAX_COPIED_BYTES`` to it, counted as
each one is applied, so a patch cannot make the process build a huge state
before it is refused.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import jsonpointer

from resumable._internal import serialization
from resumable.errors import InvalidPatchError, NotSerializableError

#: How much a patch's ``copy`` operations may add to the state, in total.
MAX_COPIED_BYTES = 1 << 20


def apply_state_patch(state: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """The patched copy of `state`; InvalidPatchError if the patch is malformed,
    does not apply, or leaves something other than a storable JSON object."""
    if not isinstance(patch, list):
        raise InvalidPatchError("the state patch is not an RFC 6902 patch: not a list")
    result: Any = copy.deepcopy(state)
    copied = 0
    try:
        for op in patch:
            if isinstance(op, dict) and op.get("op") == "copy":
                copied += _size(jsonpointer.resolve_pointer(result, op["from"]))
                if copied > MAX_COPIED_BYTES:
                    raise InvalidPatchError(
                        f"the state patch copies more than {MAX_COPIED_BYTES} bytes of state"
                    )
            result = jsonpatch.JsonPatch([op]).apply(result, in_place=True)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        raise InvalidPatchError(f"the state patch does not apply: {exc}") from None
    except (TypeError, KeyError, AttributeError) as exc:
        raise InvalidPatchError(f"the state patch is not an RFC 6902 patch: {exc}") from None
    except RecursionError:
        raise InvalidPatchError(
            f"the patched state nests deeper than {serialization.MAX_DEPTH} levels"
        ) from None
    if not isinstance(result, dict):
        raise InvalidPatchError("the patched state must still be a JSON object")
    try:
        serialization.dumps(result, "the patched state")
    except NotSerializableError as exc:
        raise InvalidPatchError(exc.message) from None
    return result


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
