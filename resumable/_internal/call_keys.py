"""The identity of a tool call: its arguments as canonical JSON, the hash
replay compares, and the idempotency key derived from them.

One rule for every process: the worker derives a call's key when it makes the
call (``resumable/queue/tool_calls.py``), ``resumable.testing`` does in memory,
and an operator's preview of ``accept`` (``resumable/services/blocked.py``)
derives in advance the key a diverged call will be made under. The agent API
re-exports ``tool_request`` and ``idempotency_key`` (``resumable.context``).
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Iterator
from typing import Any, Literal

from resumable._internal import serialization


def tool_request(tool: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """A call's arguments as canonical JSON: with its tool and position, its
    identity (refused here when JSON or PostgreSQL cannot hold them)."""
    return serialization.canonical(
        {"args": list(args), "kwargs": kwargs}, f"tool {tool!r} arguments"
    )


def idempotency_key(
    session_id: uuid.UUID, step_seq: int, step: str, call_index: int, tool: str, request: str
) -> str:
    """The key of one logical call: same inputs, same key, on every replay."""
    material = "\x1f".join([str(session_id), str(step_seq), step, str(call_index), tool, request])
    return "rsm_" + hashlib.sha256(material.encode()).hexdigest()


def args_hash(request: str) -> str:
    """A hash of a call's canonical (unredacted) arguments, compared on replay
    (the worker's ``resumable.queue.tool_calls.args_hash`` is the same rule)."""
    return hashlib.sha256(request.encode()).hexdigest()


Change = Literal["changed", "added", "removed"]

# A key written as ``.key`` in a path; any other as ``["key"]``.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ABSENT = object()


def argument_changes(recorded: Any, requested: Any) -> Iterator[tuple[str, Change, Any, Any]]:
    """How a call's arguments (``{"args": [...], "kwargs": {...}}``, as
    recorded) differ from those asked for now: ``(path, change, recorded
    value, requested value)``, keyword arguments by name, positional ones as
    ``args[i]``, and below them ``.key`` / ``[index]``. A blocked session's
    message and an operator's preview of ``accept`` both name them, rather
    than the tool twice."""
    before = recorded if isinstance(recorded, dict) else {}
    after = requested if isinstance(requested, dict) else {}
    yield from _diff(
        {f"args[{i}]": v for i, v in enumerate(before.get("args") or [])}
        | dict(before.get("kwargs") or {}),
        {f"args[{i}]": v for i, v in enumerate(after.get("args") or [])}
        | dict(after.get("kwargs") or {}),
        "",
    )


def _diff(before: Any, after: Any, path: str) -> Iterator[tuple[str, Change, Any, Any]]:
    if isinstance(before, dict) and isinstance(after, dict):
        for key in list(before) + [k for k in after if k not in before]:
            sub = _key_path(path, str(key))
            yield from _diff(before.get(key, _ABSENT), after.get(key, _ABSENT), sub)
    elif isinstance(before, list) and isinstance(after, list):
        for i in range(max(len(before), len(after))):
            yield from _diff(
                before[i] if i < len(before) else _ABSENT,
                after[i] if i < len(after) else _ABSENT,
                f"{path}[{i}]",
            )
    elif before is _ABSENT:
        yield path, "added", None, after
    elif after is _ABSENT:
        yield path, "removed", before, None
    elif canonical_json(before) != canonical_json(after):
        yield path, "changed", before, after


def _key_path(path: str, key: str) -> str:
    if not path:  # the top level: a keyword argument, or args[i] as built above
        return key
    return f"{path}.{key}" if _NAME.fullmatch(key) else f"{path}[{json.dumps(key)}]"


def canonical_json(value: Any) -> str:
    """`value` as compact JSON with sorted keys: equal values, equal text."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def divergence_message(
    step: str, index: int, recorded_tool: str, tool: str, recorded: Any, requested: Any
) -> str:
    """What a blocked session says of a replayed call that asks for something
    else than recorded: the other tool, or which arguments changed (`recorded`
    and `requested`: the arguments as recorded, redacted)."""
    if recorded_tool != tool:
        what = f"another tool than recorded: recorded {recorded_tool!r}, now {tool!r}"
    else:
        changed = [path for path, *_ in argument_changes(recorded, requested)]
        shown = ", ".join(changed[:5]) + (", ..." if len(changed) > 5 else "")
        what = "other arguments than recorded" + (
            f" (changed: {shown})" if changed else " (in redacted values)"
        )
    return f"step {step!r} call #{index} of tool {tool!r} asks for {what}"
