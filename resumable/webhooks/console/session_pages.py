"""The sessions list, the session page and the preview of accepting a
blocked session's new calls (reads only; actions are in ``session_actions.py``)."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from resumable.errors import ResumableError, SessionNotFoundError
from resumable.models.session_queries import SEARCHABLE_DOCUMENTS
from resumable.models.status import SessionStatus
from resumable.services.blocked import BlockedSessions
from resumable.webhooks.console import queries
from resumable.webhooks.console.errors import status_of
from resumable.webhooks.console.forms import Form, FormError
from resumable.webhooks.console.render import page
from resumable.webhooks.console.session_view import session_view
from resumable.webhooks.console.state import web_state
from resumable.webhooks.database_calls import database_call
from resumable.webhooks.request_models import MAX_SEQ

STATUSES = [status.value for status in SessionStatus]
PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
_ID_PREFIX = re.compile(r"[0-9a-f-]{1,36}")
_DURATION = re.compile(r"(\d{1,6})\s*(s|m|min|h|d)")
_UNITS = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
# An age filter reaches back at most this far: 999999d would be a date before
# year 1, which Python cannot hold (a 500 otherwise), and no session is older.
_MAX_AGE = timedelta(days=36500)
_MAX_CURSOR_LENGTH = 200

# What a successful action says on the page it returns to (a fixed set: the
# query string cannot put words in the console's mouth).
NOTICES = {
    "cancelled": "The session was cancelled.",
    "priority_changed": "The session's priority was changed.",
    "signal_accepted": "The signal was stored; the session takes it when it waits for its topic.",
    "signal_duplicate": "That signal id was already received; nothing new was stored.",
    "retried": "The dead letter was retried: the session resumes from its latest checkpoint.",
    "discarded": "The dead letter was discarded.",
    "forked": "This session was forked from a checkpoint of another one and is queued.",
    "blocked_resumed": "The blocked session was queued to run again on the code deployed now.",
    "blocked_accepted": "The new behaviour was accepted: the recorded calls from the divergence"
    " on are superseded (their effects stay) and the session is queued.",
    "blocked_failed": "The blocked session was failed: its saga compensates what it did.",
}


def duration(form: Form, name: str, label: str) -> timedelta | None:
    text = form.text(name, label, max_length=20)
    if text is None:
        return None
    match = _DURATION.fullmatch(text.lower())
    if not match:
        raise FormError(f"{label} must be a duration like 90s, 15m, 2h or 7d")
    age = timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])
    if age > _MAX_AGE:
        raise FormError(f"{label} may be at most 36500d (100 years)")
    return age


# The longest value a search by path compares (a search, not a document).
MAX_SEARCHED_VALUE = 1000


def session_filter(form: Form) -> queries.SessionFilter:
    status = form.text("status", "Status", max_length=20)
    if status is not None and status not in STATUSES:
        raise FormError(f"Status must be one of {', '.join(STATUSES)}")
    prefix = form.text("id", "The session id", max_length=36)
    if prefix is not None:
        prefix = prefix.lower()
        if not _ID_PREFIX.fullmatch(prefix):
            raise FormError("The session id is hexadecimal digits and dashes (any leading part)")
    document = form.text("in", "Search in", max_length=10)
    if document is not None and document not in SEARCHABLE_DOCUMENTS:
        raise FormError(f"Search in must be one of {', '.join(SEARCHABLE_DOCUMENTS)}")
    path_text = form.text("path", "The path", max_length=500)
    value = form.text("value", "The value", max_length=MAX_SEARCHED_VALUE)
    if (path_text is None) != (value is None):
        raise FormError("A search by path needs both a path (customer.id) and a value (42)")
    path = None
    if path_text is not None:
        path = path_text.split(".")
        if any(not part for part in path):
            raise FormError("The path is keys and list positions joined by dots (items.0.sku)")
    return queries.SessionFilter(
        status=status,
        agent=form.text("agent", "The agent", max_length=200),
        id_prefix=prefix,
        older_than=duration(form, "older_than", "Older than"),
        newer_than=duration(form, "newer_than", "Newer than"),
        error=form.text("error", "The error", max_length=200),
        document=(document or "input") if path else None,
        path=path,
        value=value,
    )


async def list_sessions(request: Request) -> Response:
    state = web_state(request)
    form = Form(dict(request.query_params))
    error: str | None = None
    rows: list[queries.SessionSummary] = []
    next_cursor = None
    status = 200
    try:
        cursor = form.text("cursor", "The page cursor", max_length=_MAX_CURSOR_LENGTH)
        limit = form.integer("limit", "The page size", 1, MAX_PAGE_SIZE) or PAGE_SIZE
        where = session_filter(form)
        rows, next_cursor = await database_call(
            lambda: queries.find_sessions(state.db, where, limit=limit, cursor=cursor)
        )
    except FormError as exc:
        error, status = exc.message, exc.status
    except ResumableError as exc:  # a cursor this console did not hand out
        error, status = exc.message, status_of(exc)
    counts = await database_call(state.client.count_by_status)
    agents = await database_call(queries.known_agents, state.db)
    base = {k: v for k, v in form.fields.items() if k != "cursor" and v}
    return page(
        request,
        "sessions.html",
        status,
        rows=rows,
        next_cursor=next_cursor,
        counts=counts,
        statuses=STATUSES,
        agents=agents,
        filters=form.fields,
        documents=SEARCHABLE_DOCUMENTS,
        base=base,
        error=error,
    )


def path_session_id(request: Request) -> uuid.UUID:
    raw = str(request.path_params["session_id"])
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise SessionNotFoundError(f"no session {raw[:80]!r}") from None


async def render_session(
    request: Request,
    session_id: uuid.UUID,
    *,
    status: int = 200,
    error: str | None = None,
    failed: str | None = None,
    form: dict[str, str] | None = None,
) -> Response:
    """The session page; after a refused action, with the error beside the
    form that failed (`failed`) and what was typed in it (`form`)."""
    state = web_state(request)
    query = Form(dict(request.query_params))
    try:
        at = query.integer("at", "The checkpoint", 1, MAX_SEQ)
        events_after = query.integer("events_after", "events_after", 0, 2**62) or 0
    except FormError as exc:
        at, events_after = None, 0
        error, status = error or exc.message, status if error else exc.status
    view = await database_call(
        lambda: session_view(state, session_id, at=at, events_after=events_after)
    )
    done = request.query_params.get("done")
    context: dict[str, Any] = {
        "view": view,
        "row": view.row,
        "error": error,
        "failed": failed,
        "form": form or {},
        "notice": NOTICES.get(done or "") if not error else None,
    }
    return page(request, "session.html", status, **context)


async def show_session(request: Request) -> Response:
    return await render_session(request, path_session_id(request))


async def render_accept(
    request: Request,
    session_id: uuid.UUID,
    *,
    status: int = 200,
    error: str | None = None,
    reason: str = "",
) -> Response:
    """What accepting the blocked session's new calls does, and the form that
    confirms it (the preview's keys, so it confirms what was shown). A
    session that cannot be accepted: its page, with why."""
    state = web_state(request)
    blocked = BlockedSessions(state.settings, state.db, state.broker)
    try:
        preview = await database_call(blocked.preview_accept, session_id)
    except ResumableError as exc:
        if status_of(exc) in (404, 500):
            raise
        return await render_session(
            request, session_id, status=status_of(exc), error=error or exc.message
        )
    return page(request, "accept.html", status, preview=preview, error=error, reason=reason)


async def show_accept(request: Request) -> Response:
    return await render_accept(request, path_session_id(request))


routes = [
    Route("/ui/sessions", list_sessions, methods=["GET"]),
    Route("/ui/sessions/{session_id}", show_session, methods=["GET"]),
    Route("/ui/sessions/{session_id}/accept", show_accept, methods=["GET"]),
]
