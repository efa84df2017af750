"""Callback tokens carry their session id (resumable/models/callback_tokens.py)."""

from __future__ import annotations

import re
import uuid

from resumable.models.callback_tokens import new_token, session_of
from resumable.webhooks.params import TOKEN_PATTERN


def test_a_new_token_names_its_session_and_fits_the_callback_route() -> None:
    session_id = uuid.uuid4()
    tokens = {new_token(session_id) for _ in range(100)}
    assert len(tokens) == 100  # a secret part of its own each time
    for token in tokens:
        assert len(token) == 75 and token.startswith(session_id.hex)
        assert re.match(TOKEN_PATTERN, token)
        assert session_of(token) == session_id


def test_a_token_made_before_or_not_of_that_shape_names_no_session() -> None:
    session_hex = uuid.uuid4().hex
    for token in (
        "tok-race",
        "A" * 43,  # secrets.token_urlsafe(32), as tokens were made before
        session_hex,  # no secret part
        session_hex + "x" * 42,  # one short
        session_hex + "x" * 44,  # one long
        session_hex.upper() + "x" * 43,  # hex as uuid.hex never writes it
        session_hex[:-1] + "g" + "x" * 43,
        session_hex + "x" * 42 + "/",
        "",
    ):
        assert session_of(token) is None, token
