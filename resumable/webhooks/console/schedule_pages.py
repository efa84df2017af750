"""The schedules page: every schedule with when it runs, its next due time
and its last session, and the operator's actions on each (pause with a
reason, resume, trigger now, delete). Each action is a POST with the CSRF
token, made through the same client calls as the API and the CLI (audited
as ``console:<name>`` in the log), answered with a redirect (303): to the
list, or, for a trigger, to the session it started. A refused action shows
the list again with why; nothing was written.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from resumable.errors import ResumableError
from resumable.schemas import ScheduleInfo
from resumable.webhooks.console.errors import status_of
from resumable.webhooks.console.forms import Form, FormError, action_form
from resumable.webhooks.console.render import page
from resumable.webhooks.console.state import operator, web_state
from resumable.webhooks.database_calls import database_call

# The most schedules listed (a deployment with more pages them over the API).
SCHEDULES_SHOWN = 500
_DONE = {
    "paused": "Paused: it starts nothing until resumed.",
    "resumed": "Resumed: it starts sessions again from its next due time.",
    "deleted": "Deleted. Its sessions go on; one defined in code comes back when a worker "
    "that loads its agent starts.",
}


async def list_schedules(
    request: Request, *, status: int = 200, error: str | None = None
) -> Response:
    state = web_state(request)
    schedules: list[ScheduleInfo] = await database_call(
        state.client.schedules, limit=SCHEDULES_SHOWN
    )
    done = request.query_params.get("done", "")
    return page(
        request,
        "schedules.html",
        status=status,
        schedules=schedules,
        error=error,
        notice=_DONE.get(done),
        shown=SCHEDULES_SHOWN,
    )


async def _act(request: Request, act: Callable[[Form, str, str], str]) -> Response:
    """Check the CSRF token, run `act(form, actor, name)` and go where it
    says; a refusal shows the list with why."""
    name = str(request.path_params["name"])
    try:
        form = await action_form(request)
        target = await database_call(act, form, operator(request).actor, name)
    except (FormError, ResumableError) as exc:
        status = exc.status if isinstance(exc, FormError) else status_of(exc)
        if status == 500:
            raise
        return await list_schedules(request, status=status, error=exc.message)
    return RedirectResponse(target, 303)


async def pause(request: Request) -> Response:
    state = web_state(request)

    def act(form: Form, actor: str, name: str) -> str:
        state.client.pause_schedule(name, reason=form.text("reason", "The reason"), actor=actor)
        return "/ui/schedules?done=paused"

    return await _act(request, act)


async def resume(request: Request) -> Response:
    state = web_state(request)

    def act(form: Form, actor: str, name: str) -> str:
        state.client.resume_schedule(name, actor=actor)
        return "/ui/schedules?done=resumed"

    return await _act(request, act)


async def trigger(request: Request) -> Response:
    state = web_state(request)

    def act(form: Form, actor: str, name: str) -> str:
        session_id = state.client.trigger_schedule(name, actor=actor)
        return f"/ui/sessions/{session_id}"

    return await _act(request, act)


async def delete(request: Request) -> Response:
    state = web_state(request)

    def act(form: Form, actor: str, name: str) -> str:
        if form.raw("sure") != "on":
            raise FormError("Tick “sure” to delete a schedule")
        state.client.delete_schedule(name, actor=actor)
        return "/ui/schedules?done=deleted"

    return await _act(request, act)


routes = [
    Route("/ui/schedules", list_schedules, methods=["GET"]),
    Route("/ui/schedules/{name}/pause", pause, methods=["POST"]),
    Route("/ui/schedules/{name}/resume", resume, methods=["POST"]),
    Route("/ui/schedules/{name}/trigger", trigger, methods=["POST"]),
    Route("/ui/schedules/{name}/delete", delete, methods=["POST"]),
]
