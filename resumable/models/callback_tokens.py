"""Callback tokens that carry their session id.

A callback's URL is all an external system sends back, so the token is the
only key the receiver has. Prefixed with its session's id (32 hex digits),
it lets every statement of the receipt find the callback's rows by session
as well as by token: one partition of a table partitioned or distributed by
session id (``tests/integration/test_partition_plan.py``, issue 40). The
secret part is ``secrets.token_urlsafe(32)`` as before (256 random bits); a
token made before carries no prefix and is still found, by token alone.
"""

from __future__ import annotations

import re
import secrets
import uuid

_PREFIXED = re.compile(r"^([0-9a-f]{32})[A-Za-z0-9_\-]{43}$")


def new_token(session_id: uuid.UUID) -> str:
    """A fresh token for a callback of the session."""
    return session_id.hex + secrets.token_urlsafe(32)


def session_of(token: str) -> uuid.UUID | None:
    """The session a token names; None for a token made before they did."""
    found = _PREFIXED.match(token)
    return uuid.UUID(found[1]) if found else None
