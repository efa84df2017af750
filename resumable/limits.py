"""Concurrency limits: how many sessions of a kind run at once.

``Agent("support", concurrency=Concurrency(limit=2, key="tenant"))`` lets
at most two sessions of the agent *run* at once for each value of
``input["tenant"]``; with no ``key``, two for the whole agent. A slot is
held while a worker runs the session (from its claim until it suspends,
finishes, fails, yields or is handed back), not while it waits: a session
suspended for three days for an approval holds no slot.

A session over its key's limit waits without a worker and without a queue
message: it stays ``pending`` and the claim marks it *waiting for a slot*.
When a run of the same key ends, its worker wakes the oldest waiters (as many
as there are free slots), so a key's sessions start in the order they came
to wait; a slot whose worker died frees when its lease (or its heartbeat)
runs out, and the scheduler then wakes the waiters. Keys are independent:
one tenant's ten thousand sessions wait in their own line and never take a
slot from another tenant.

Why the claim, not the start: the limit belongs to the agent's code, which
only workers load (a web process or a client starting sessions may know
nothing of it), and the same rule then covers every way a session becomes
runnable: a start, a callback, a timer, a retry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from resumable.errors import AgentDefinitionError

# The largest limit (a slot count is an int4 in the database).
MAX_CONCURRENCY_LIMIT = 1_000_000
# The deepest key path into a session's input.
MAX_KEY_DEPTH = 8


@dataclass(frozen=True)
class Concurrency:
    """At most `limit` running sessions per value of `key`.

    `key` names a field of the session's input (``"tenant"``), or a path to
    one (``("customer", "id")``: objects by field, lists by position);
    None: one limit for the whole agent. An input that lacks the field
    counts under the key's missing value, shared by all such sessions. The
    value is compared as text: ``7`` and ``"7"`` are the same key."""

    limit: int
    key: str | Sequence[str] | None = None

    def __post_init__(self) -> None:
        limit = self.limit
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise AgentDefinitionError(
                f"concurrency limit must be an int, got {type(limit).__name__}"
            )
        if not 1 <= limit <= MAX_CONCURRENCY_LIMIT:
            raise AgentDefinitionError(
                f"concurrency limit must be between 1 and {MAX_CONCURRENCY_LIMIT:,}, got {limit}"
            )
        object.__setattr__(self, "key", _checked_path(self.key))

    @property
    def path(self) -> tuple[str, ...]:
        """The key's path into the input; empty: the agent as a whole."""
        key = self.key
        assert key is None or isinstance(key, tuple)
        return () if key is None else key

    def spec(self) -> dict[str, Any]:
        """As the claim reads it: ``{"limit": n, "key": [field, ...]}``."""
        return {"limit": self.limit, "key": list(self.path)}

    def describe(self) -> str:
        """One line for an operator: "2 at a time per input.tenant"."""
        per = "for the agent" if not self.path else "per input." + ".".join(self.path)
        return f"{self.limit} at a time {per}"


def _checked_path(key: object) -> tuple[str, ...] | None:
    if key is None:
        return None
    path: tuple[object, ...] = (key,) if isinstance(key, str) else tuple(_sequence(key))
    if not path or len(path) > MAX_KEY_DEPTH:
        raise AgentDefinitionError(
            f"a concurrency key is a field name or a path of 1 to {MAX_KEY_DEPTH} field names"
        )
    for part in path:
        if not isinstance(part, str) or not part or len(part) > 200 or not _storable(part):
            raise AgentDefinitionError(
                f"concurrency key parts must be non-empty field names, got {part!r}"
            )
    return tuple(str(part) for part in path)


def _storable(text: str) -> bool:
    """No NUL and no lone surrogate: PostgreSQL's text and JSON hold neither."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def _sequence(key: object) -> Sequence[object]:
    if isinstance(key, Sequence) and not isinstance(key, bytes | bytearray):
        return key
    raise AgentDefinitionError(
        f"a concurrency key is a field name or a sequence of field names, got {key!r}"
    )
