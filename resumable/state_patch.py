"""Applying an operator's RFC 6902 JSON Patch to a session's state (a dead
letter's retry, a fork), with one clear error for every way it can be wrong."""

from __future__ import annotations

from typing import Any

import jsonpatch

from resumable.errors import InvalidPatchError


def apply_state_patch(state: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """The patched copy of `state`; InvalidPatchError if the patch is malformed,
    does not apply, or leaves something other than a JSON object."""
    try:
        result = jsonpatch.JsonPatch(patch).apply(state)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
        raise InvalidPatchError(f"the state patch does not apply: {exc}") from None
    except (TypeError, KeyError, AttributeError) as exc:
        raise InvalidPatchError(f"the state patch is not an RFC 6902 patch: {exc}") from None
    if not isinstance(result, dict):
        raise InvalidPatchError("the patched state must still be a JSON object")
    return result
