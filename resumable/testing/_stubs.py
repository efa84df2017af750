"""Calling tools, checks and compensations, or the stubs a test puts in their place.

A stub is looked up by the name the step gives (``ctx.tool("charge", ...)``,
``Poll("settled", ...)``, ``compensate="refund"``), so a test replaces what a
step would call without patching modules. Whatever is called is called as a
worker calls it: with ``idempotency_key=`` when it takes it; an awaitable it
returns is awaited on an event loop of its own (never a thread).
"""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

from resumable.context import accepts_idempotency_key

#: What a test passes as ``tools=``, ``checks=`` or ``compensations=``.
Stubs = Mapping[str, Any]
#: No stub for this name: the step's own function runs.
MISSING: Any = object()


class LoopRunningError(RuntimeError):
    """An async step, check or compensation met an event loop already running."""


def answers(*values: Any) -> Callable[..., Any]:
    """A stub giving `values` in turn, one per call (an exception among them is
    raised): an LLM's successive replies, a poll's "not yet, not yet, done"."""
    remaining = list(values)

    def next_answer(*args: Any, **kwargs: Any) -> Any:
        if not remaining:
            raise AssertionError(f"called more often than the {len(values)} answers it was given")
        value = remaining.pop(0)
        if isinstance(value, BaseException):
            raise value
        return copy.deepcopy(value)

    return next_answer


def invoke(
    target: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    key: str | None = None,
    fenced: Callable[..., Any] | None = None,
) -> Any:
    """Call `target`, a function or a stub, as a worker calls the function:
    with ``idempotency_key=`` when it takes it, and a stub standing in for a
    fenced tool (`fenced`, ``functools.partial(fn, fencing_token=...)``) with
    ``fencing_token=`` when it takes it."""
    if isinstance(target, BaseException):
        raise target
    if isinstance(target, type) and issubclass(target, BaseException):
        raise target()
    if not callable(target):
        return copy.deepcopy(target)
    if isinstance(fenced, functools.partial) and target is not fenced:
        token = fenced.keywords.get("fencing_token")
        if token is not None and _accepts(target, "fencing_token"):
            kwargs = {**kwargs, "fencing_token": token}
    if key is not None and accepts_idempotency_key(target):
        kwargs = {**kwargs, "idempotency_key": key}
    return target(*args, **kwargs)


def resolve(value: Any) -> Any:
    """`value`, or, when it is awaitable, its result on an event loop of its own."""
    if not inspect.isawaitable(value):
        return value
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_awaited(value))
    close(value)
    raise LoopRunningError(
        "resumable.testing runs async steps, checks and compensations on an event loop of "
        "its own, and one is running here: call it from a sync test function"
    )


def close(value: object) -> None:
    """Close a coroutine that will never be awaited, so Python does not warn about it."""
    if isinstance(value, Coroutine):
        value.close()


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value


def _accepts(fn: Callable[..., Any], name: str) -> bool:
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )
