"""Recorded calls made from inside a framework's run.

A framework drives its own loop (model request, tool calls, model request,
...); the adapters hook each model request and each tool call and make it a
recorded call through ``ctx.tool``, so a replayed step gets the recorded
answer back instead of sending the request or running the tool again.

Frameworks are async. An ``async def`` step simply awaits ``ctx.tool``. A sync
step (a worker thread) cannot await, and ``ctx.tool`` must be called from the
step's own thread; so the framework's coroutine runs on a private event loop
in a helper thread, and each recorded call it makes is handed back to the
step's thread, which records it and runs its body on the helper loop (where
the framework's HTTP clients live). One call is in flight at a time: the
adapters run tool calls sequentially, which is also what keeps every call at
the same position (and idempotency key) on a replay.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from resumable.context import StepContext

T = TypeVar("T")

_current_key: ContextVar[str | None] = ContextVar("resumable_integration_key", default=None)


def idempotency_key() -> str | None:
    """The idempotency key of the recorded tool call running now (None
    outside one). A framework tool passes it on to the external API it
    calls, so a request retried across a crash is deduplicated there."""
    return _current_key.get()


class Record(Protocol):
    """Make one recorded call: ``body`` runs at most once per logical call and
    returns JSON; a replay returns what it returned the first time. A model
    request passes ``side_effects=False``, a tool ``defer_record=True``: each
    answer or result rides with the step's next write, the next call's claim
    or the turn's commit (``ctx.tool``'s docstring)."""

    def __call__(
        self,
        name: str,
        request: Any,
        body: Callable[[], Awaitable[Any]],
        *,
        side_effects: bool = True,
        defer_record: bool = False,
    ) -> Awaitable[Any]: ...


async def _keyed(body: Callable[[], Awaitable[Any]], key: str) -> Any:
    token = _current_key.set(key)
    try:
        return await body()
    finally:
        _current_key.reset(token)


def async_recorder(ctx: StepContext) -> Record:
    """Recorded calls for an ``async def`` step: ``await ctx.tool(...)``."""

    async def record(
        name: str,
        request: Any,
        body: Callable[[], Awaitable[Any]],
        *,
        side_effects: bool = True,
        defer_record: bool = False,
    ) -> Any:
        async def call(request: Any, idempotency_key: str) -> Any:
            return await _keyed(body, idempotency_key)

        return await ctx.tool(
            name, call, request, side_effects=side_effects, defer_record=defer_record
        )

    return record


@dataclass
class _Call:
    name: str
    request: Any
    body: Callable[[], Awaitable[Any]]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    side_effects: bool = True
    defer_record: bool = False


@dataclass
class _Done:
    value: Any = None
    error: BaseException | None = None


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


def run_in_sync_step(ctx: StepContext, main: Callable[[Record], Awaitable[T]]) -> T:
    """Run ``main(record)`` from a sync step: the coroutine on a helper thread's
    event loop, its recorded calls on this (the step's) thread."""
    calls: queue.SimpleQueue[_Call | _Done] = queue.SimpleQueue()

    async def runner() -> T:
        loop = asyncio.get_running_loop()

        async def record(
            name: str,
            request: Any,
            body: Callable[[], Awaitable[Any]],
            *,
            side_effects: bool = True,
            defer_record: bool = False,
        ) -> Any:
            future: asyncio.Future[Any] = loop.create_future()
            calls.put(_Call(name, request, body, future, loop, side_effects, defer_record))
            return await future

        return await main(record)

    def helper() -> None:
        try:
            calls.put(_Done(value=asyncio.run(runner())))
        except BaseException as exc:  # handed to the step's thread, raised there
            calls.put(_Done(error=exc))

    thread = threading.Thread(target=helper, name=f"resumable-{ctx.agent}-loop", daemon=True)
    thread.start()
    while True:
        item = calls.get()
        if isinstance(item, _Done):
            thread.join()
            if item.error is not None:
                raise item.error
            return item.value  # type: ignore[no-any-return]
        _serve(ctx, item)


def _serve(ctx: StepContext, call: _Call) -> None:
    """Record `call` on the step's thread; its body runs on the helper loop."""

    def body(request: Any, idempotency_key: str) -> Any:
        running = asyncio.run_coroutine_threadsafe(_keyed(call.body, idempotency_key), call.loop)
        return running.result()

    try:
        value = ctx.tool(
            call.name,
            body,
            call.request,
            side_effects=call.side_effects,
            defer_record=call.defer_record,
        )
    except BaseException as exc:
        call.loop.call_soon_threadsafe(_settle, call.future, None, exc)
    else:
        call.loop.call_soon_threadsafe(_settle, call.future, value, None)
