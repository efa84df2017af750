"""Values as a worker reads them back from PostgreSQL.

A step tested here must see what a recovered worker sees: the state, input,
results and payloads after a trip through JSON (a tuple comes back a list,
``1e20`` an int, as ``jsonb`` gives numbers back), and values the database
cannot hold refused with the same error, naming where they sit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from resumable._internal import serialization
from resumable.errors import NotSerializableError, ResumableError

#: Where the kit's callback URLs point (nothing listens there).
PUBLIC_URL = "http://resumable.test"


def stored(value: Any, what: str) -> Any:
    """`value` as it comes back from the database; refused as it is refused."""
    return serialization.as_stored(json.loads(serialization.dumps(value, what)))


def json_object(state: Mapping[str, Any] | None) -> dict[str, Any]:
    """A state given by a test, as a step would find it."""
    if state is None:
        return {}
    value = stored(dict(state) if isinstance(state, Mapping) else state, "state")
    if not isinstance(value, dict):
        raise NotSerializableError("state must be a JSON object (a dict)")
    return value


def parse_time(value: object) -> datetime | None:
    """A time a wait's spec holds (ISO 8601), or None."""
    return datetime.fromisoformat(str(value)) if value else None


def error_record(exc: BaseException | None, step: str | None) -> dict[str, Any] | None:
    """A failure as a parent's ``ctx.wake.payload["failures"]`` shows it."""
    if exc is None:
        return None
    return {
        "code": exc.code if isinstance(exc, ResumableError) else "step_failed",
        "type": type(exc).__name__,
        "message": serialization.exception_text(exc),
        "step": step,
        "traceback": serialization.traceback_text(exc),
    }
