"""The session page's actions: cancel, signal, fork, resume, accept or fail a
blocked session, and retry or discard its dead letter. Each is a POST with the
session's CSRF token, audited as ``console:<name>`` by the same Python calls
the API and the CLI make, and answered with a redirect (303) to the page that
shows the result. A refused
action renders the session page again with the error beside its form, and
what was typed; nothing was written.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Literal

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from resumable.errors import DeadLetterNotFoundError, ResumableError, SessionNotFoundError
from resumable.services import arguments
from resumable.services.blocked import BlockedSessions
from resumable.services.dead_letters import DeadLetters
from resumable.services.inbox import Verdict
from resumable.services.time_travel import TimeTravel
from resumable.webhooks.console.errors import status_of
from resumable.webhooks.console.forms import Form, FormError, action_form
from resumable.webhooks.console.session_pages import (
    path_session_id,
    render_accept,
    render_session,
)
from resumable.webhooks.console.state import operator, web_state
from resumable.webhooks.database_calls import database_call
from resumable.webhooks.request_models import MAX_SEQ

TOPIC = re.compile(r"[A-Za-z0-9_.:\-]{1,100}")
# Signal ids are indexed; the API and the CLI bound them the same way.
MAX_KEY_BYTES = 256

Act = Callable[[Form, str, uuid.UUID], str]
# The page of a refused action: (request, session id, status, error, what was typed).
Refused = Callable[[Request, uuid.UUID, int, str, dict[str, str]], Awaitable[Response]]
# Keys of the recorded calls an accept confirms, space-separated (68 characters each).
MAX_CONFIRM_CHARS = 200_000


async def _act(
    request: Request,
    name: str,
    session_of: Callable[[], uuid.UUID],
    act: Act,
    refused: Refused | None = None,
) -> Response:
    """Check the CSRF token, then run `act(form, actor, session_id)`, which
    returns where to go next; on a refusal, the session page with the error
    (or the page `refused` renders)."""
    form: Form | None = None
    try:
        form = await action_form(request)  # CsrfError: a 403 page, nothing done
        session_id = await database_call(session_of)
        target = await database_call(act, form, operator(request).actor, session_id)
    except (FormError, ResumableError) as exc:
        status = exc.status if isinstance(exc, FormError) else status_of(exc)
        if status in (404, 500):
            raise
        typed = {k: v for k, v in (form.fields if form else {}).items() if k != "csrf"}
        session_id = await database_call(session_of)
        if refused is not None:
            return await refused(request, session_id, status, exc.message, typed)
        return await render_session(
            request, session_id, status=status, error=exc.message, failed=name, form=typed
        )
    return RedirectResponse(target, 303)


def _page(session_id: uuid.UUID, done: str) -> str:
    return f"/ui/sessions/{session_id}?done={done}"


async def cancel(request: Request) -> Response:
    state = web_state(request)

    def act(form: Form, actor: str, session_id: uuid.UUID) -> str:
        reason = form.text("reason", "The reason")
        state.client.cancel(session_id, actor=actor, reason=reason)
        return _page(session_id, "cancelled")

    return await _act(request, "cancel", lambda: path_session_id(request), act)


async def priority(request: Request) -> Response:
    state = web_state(request)

    def act(form: Form, actor: str, session_id: uuid.UUID) -> str:
        level = form.text("priority", "The priority", required=True)
        reason = form.text("reason", "The reason")
        state.client.set_priority(session_id, level, actor=actor, reason=reason)  # type: ignore[arg-type]
        return _page(session_id, "priority_changed")

    return await _act(request, "priority", lambda: path_session_id(request), act)


async def signal(request: Request) -> Response:
    state = web_state(request)

    def act(form: Form, actor: str, session_id: uuid.UUID) -> str:
        topic = form.text(
            "topic", "The topic", required=True, pattern=TOPIC, hint="1-100 of A-Z a-z 0-9 _ . : -"
        )
        payload = form.json("payload", "The payload")
        key = form.text("key", "The signal id", max_length=MAX_KEY_BYTES)
        if key is not None and len(key.encode()) > MAX_KEY_BYTES:
            raise FormError(f"The signal id is longer than {MAX_KEY_BYTES} bytes")
        assert topic is not None
        receipt = state.inbox.signal(session_id, topic, payload, key, actor)
        state.metrics.deliveries.labels("signal", receipt.verdict.value).inc()
        if receipt.verdict is Verdict.UNKNOWN:
            raise SessionNotFoundError(f"no session {session_id}")
        if receipt.verdict in (Verdict.CLOSED, Verdict.REUSED):
            raise FormError(receipt.message, 409)
        done = "signal_duplicate" if receipt.verdict is Verdict.DUPLICATE else "signal_accepted"
        return _page(session_id, done)

    return await _act(request, "signal", lambda: path_session_id(request), act)


async def fork(request: Request) -> Response:
    state = web_state(request)

    def act(form: Form, actor: str, session_id: uuid.UUID) -> str:
        at = form.integer("at", "The checkpoint", 1, MAX_SEQ)
        if at is None:
            raise FormError("The checkpoint to fork at is required")
        fork_id = TimeTravel(state.db, state.client.registry).fork(
            session_id,
            at,
            actor=actor,
            state_patch=form.patch("patch"),
            broker=state.broker,
            settings=state.settings,
            allow_compensated=form.flag("allow_compensated"),
        )
        return _page(fork_id, "forked")

    return await _act(request, "fork", lambda: path_session_id(request), act)


def _dead_letters(request: Request) -> tuple[DeadLetters, Callable[[], uuid.UUID], int]:
    """The dead letters, a reader of the letter's session, and the letter's id."""
    state = web_state(request)
    letters = DeadLetters(state.settings, state.db, state.broker)
    raw = str(request.path_params["dead_letter_id"])
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 19):
        raise DeadLetterNotFoundError(f"no dead letter {raw[:40]!r}")
    number = arguments.dead_letter_id(int(raw))
    return letters, lambda: letters.get(number).session_id, number


async def retry_dead_letter(request: Request) -> Response:
    letters, session_of, number = _dead_letters(request)

    def act(form: Form, actor: str, session_id: uuid.UUID) -> str:
        reason = form.text("reason", "The reason")
        letters.retry(number, actor=actor, reason=reason, state_patch=form.patch("patch"))
        return _page(session_id, "retried")

    return await _act(request, "retry", session_of, act)


def _blocked(action: BlockedAction) -> Callable[[Request], Awaitable[Response]]:
    """Resume, accept or fail a blocked session (the CLI's and the API's rules).

    Accept is posted from its preview page (``GET .../accept``), whose form
    carries the keys of the recorded calls it showed as superseded (`confirm`,
    space-separated): the service refuses it unless they are exactly the
    calls it supersedes, and the preview page comes back with why."""

    async def endpoint(request: Request) -> Response:
        state = web_state(request)

        def act(form: Form, actor: str, session_id: uuid.UUID) -> str:
            reason = form.text("reason", "The reason", required=True)
            sessions = BlockedSessions(state.settings, state.db, state.broker)
            if action == "accept":
                typed = form.text("confirm", "The confirmation", max_length=MAX_CONFIRM_CHARS)
                confirm = None if "confirm" not in form.fields else (typed or "").split()
                sessions.accept(session_id, actor=actor, reason=reason, confirm=confirm)
            else:
                getattr(sessions, action)(session_id, actor=actor, reason=reason)
            return _page(session_id, BLOCKED_NOTICES[action])

        refused = _refused_accept if action == "accept" else None
        return await _act(request, action, lambda: path_session_id(request), act, refused)

    return endpoint


async def _refused_accept(
    request: Request, session_id: uuid.UUID, status: int, error: str, typed: dict[str, str]
) -> Response:
    """A refused accept: its preview again (as it is now), with why."""
    return await render_accept(
        request, session_id, status=status, error=error, reason=typed.get("reason", "")
    )


BlockedAction = Literal["resume", "accept", "fail"]
BLOCKED_NOTICES: dict[BlockedAction, str] = {
    "resume": "blocked_resumed",
    "accept": "blocked_accepted",
    "fail": "blocked_failed",
}


async def discard_dead_letter(request: Request) -> Response:
    letters, session_of, number = _dead_letters(request)

    def act(form: Form, actor: str, session_id: uuid.UUID) -> str:
        reason = form.text("reason", "The reason", required=True)
        assert reason is not None
        letters.discard(number, actor=actor, reason=reason)
        return _page(session_id, "discarded")

    return await _act(request, "discard", session_of, act)


routes = [
    Route("/ui/sessions/{session_id}/cancel", cancel, methods=["POST"]),
    Route("/ui/sessions/{session_id}/priority", priority, methods=["POST"]),
    Route("/ui/sessions/{session_id}/signal", signal, methods=["POST"]),
    Route("/ui/sessions/{session_id}/fork", fork, methods=["POST"]),
    *(
        Route(f"/ui/sessions/{{session_id}}/{action}", _blocked(action), methods=["POST"])
        for action in BLOCKED_NOTICES
    ),
    Route("/ui/dead-letters/{dead_letter_id}/retry", retry_dead_letter, methods=["POST"]),
    Route("/ui/dead-letters/{dead_letter_id}/discard", discard_dead_letter, methods=["POST"]),
]
