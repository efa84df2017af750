"""Tool calls and callback tokens, recorded in memory as a worker records them.

A worker commits these at once, not with the step (``queue/tool_calls.py``,
``queue/callbacks.py``), so they outlive a step that fails or is run again:
here they live in a ``Records`` that a session keeps across its attempts and
that ``StepResult.rerun`` hands to the rerun. The rules are the worker's: the
key from ``resumable.context.idempotency_key``; a completed call is replayed
(its recorded, redacted copy returned, the tool not called); a failed one is
called again under the same key; another tool or other arguments at a
recorded position, or fewer calls than recorded, is a divergence.
"""

from __future__ import annotations

import base64
import copy
import functools
import hashlib
import inspect
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from resumable._internal.call_keys import divergence_message
from resumable._internal.redaction import Redactor
from resumable.context import idempotency_key, tool_request
from resumable.errors import InvalidArgumentError, ReplayDivergedError
from resumable.limits import RateLimit
from resumable.testing._stubs import MISSING, Stubs, close, invoke
from resumable.testing._values import PUBLIC_URL, stored
from resumable.waits import Callback, check_seconds
from resumable.waits import check_name as check_topic


@dataclass(frozen=True)
class ToolCallRecord:
    """One ``ctx.tool`` call as a step made it."""

    tool: str
    #: The arguments as they were when the call was made.
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    #: The idempotency key a worker gives this call (``resumable.context.idempotency_key``).
    key: str
    step: str
    seq: int
    index: int
    compensate: str | None = None
    fencing_token: int | None = None
    result: Any = None
    error: BaseException | None = None
    #: The recorded result was returned; the tool was not called.
    replayed: bool = False


@dataclass
class Cached:
    """A row of the tool-call cache."""

    key: str
    tool: str
    step: str
    seq: int
    index: int
    compensate: str | None
    request: dict[str, Any]  # {"args", "kwargs"}, redacted, as recorded
    status: str = "started"  # then "completed" or "failed"
    response: Any = None  # redacted, as recorded

    def record(self) -> ToolCallRecord:
        return ToolCallRecord(
            self.tool, tuple(self.request["args"]), self.request["kwargs"], self.key,
            self.step, self.seq, self.index, self.compensate, result=self.response,
        )  # fmt: skip


@dataclass
class CallbackRow:
    callback: Callback
    open: bool = True  # closed when the session wakes, whatever woke it


@dataclass
class Records:
    """What a worker commits at once, not with the step."""

    calls: dict[tuple[int, int], Cached] = field(default_factory=dict)
    callbacks: dict[str, CallbackRow] = field(default_factory=dict)
    callback_at: dict[tuple[int, int], str] = field(default_factory=dict)


class ToolCalls:
    """A ``ToolCallRecorder`` in memory, for one run of one step."""

    def __init__(
        self,
        records: Records,
        session_id: uuid.UUID,
        seq: int,
        step: str,
        stubs: Stubs,
        redactor: Redactor,
        log: list[ToolCallRecord],
    ) -> None:
        self._records, self._session_id, self._seq, self._step = records, session_id, seq, step
        self._stubs, self._redactor, self._log = stubs, redactor, log
        self._next_index = 0
        #: This run's calls, in the order they were made.
        self.calls: list[ToolCallRecord] = []

    def call(
        self,
        tool: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        compensate: str | None = None,
        rate_limit: RateLimit | None = None,  # checked by the context; not enforced in memory
        *,
        side_effects: bool = True,  # in memory every call is recorded at once
        defer_record: bool = False,
    ) -> Any:
        cached, replayed = self._claim(self._take_index(), tool, args, kwargs, compensate)
        if replayed:
            return self._replayed(cached, fn, args, kwargs)
        try:
            result = self._call(tool, fn, args, kwargs, cached.key)
            if inspect.isawaitable(result):
                close(result)
                raise InvalidArgumentError(
                    f"the stub of tool {tool!r} is async, but the step calls the tool without await"
                )
        except Exception as exc:
            self._failed(cached, fn, args, kwargs, exc)
            raise
        return self._completed(cached, fn, args, kwargs, result)

    async def acall(
        self,
        tool: str,
        fn: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        compensate: str | None = None,
        rate_limit: RateLimit | None = None,
        *,
        side_effects: bool = True,
        defer_record: bool = False,
    ) -> Any:
        # The index is taken when the call starts, as on a worker: calls
        # gathered at once keep their positions (and keys) on every replay.
        cached, replayed = self._claim(self._take_index(), tool, args, kwargs, compensate)
        if replayed:
            return self._replayed(cached, fn, args, kwargs)
        try:
            result = self._call(tool, fn, args, kwargs, cached.key)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            self._failed(cached, fn, args, kwargs, exc)
            raise
        return self._completed(cached, fn, args, kwargs, result)

    def check_none_missing(self) -> None:
        """A rerun that made fewer calls than were recorded diverged: a worker
        blocks it rather than forget a call whose effect may have happened."""
        made = self._next_index
        beyond = sorted(
            c.index
            for (seq, index), c in self._records.calls.items()
            if seq == self._seq and index >= made and c.status != "failed"
        )
        if beyond:
            raise ReplayDivergedError(
                {
                    "kind": "tool_calls_missing",
                    "step": self._step,
                    "step_seq": self._seq,
                    "call_index": made,
                    "message": f"step {self._step!r} made {made} call(s) on replay, but "
                    f"{len(beyond)} more were recorded from call #{beyond[0]} on",
                }
            )

    def _take_index(self) -> int:
        index = self._next_index
        self._next_index += 1
        return index

    def _claim(
        self,
        index: int,
        tool: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        compensate: str | None,
    ) -> tuple[Cached, bool]:
        """The call's cache row, and whether its recorded result is replayed."""
        request = tool_request(tool, args, kwargs)
        key = idempotency_key(self._session_id, self._seq, self._step, index, tool, request)
        cached = self._records.calls.get((self._seq, index))
        redacted = self._redactor.redact({"args": list(args), "kwargs": kwargs})
        if cached is not None and cached.key != key:
            raise ReplayDivergedError(
                {
                    "kind": "tool_call_diverged",
                    "step": self._step,
                    "step_seq": self._seq,
                    "call_index": index,
                    "message": divergence_message(
                        self._step, index, cached.tool, tool, cached.request, redacted
                    ),
                }
            )
        if cached is not None and cached.status == "completed":
            return cached, True
        cached = Cached(
            key, tool, self._step, self._seq, index, compensate, stored(redacted, "request")
        )
        self._records.calls[(self._seq, index)] = cached
        return cached, False

    def _call(
        self,
        tool: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        key: str,
    ) -> Any:
        stub = self._stubs.get(tool, MISSING)
        return invoke(fn if stub is MISSING else stub, args, kwargs, key=key, fenced=fn)

    def _replayed(
        self, cached: Cached, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        response = copy.deepcopy(cached.response)
        self._record(cached, fn, args, kwargs, response, None, replayed=True)
        return response

    def _failed(
        self,
        cached: Cached,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        exc: Exception,
    ) -> None:
        cached.status = "failed"  # called again, under the same key, by the next attempt
        self._record(cached, fn, args, kwargs, None, exc)

    def _completed(
        self,
        cached: Cached,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        result: Any,
    ) -> Any:
        value = stored(result, f"result of tool {cached.tool!r}")
        # Recorded redacted: a replay returns secret fields as "[REDACTED]".
        cached.response = self._redactor.redact(value)
        cached.status = "completed"
        self._record(cached, fn, args, kwargs, result, None)
        return result  # the first run gets the tool's own value, as on a worker

    def _record(
        self,
        cached: Cached,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        result: Any,
        error: BaseException | None,
        *,
        replayed: bool = False,
    ) -> None:
        token = fn.keywords.get("fencing_token") if isinstance(fn, functools.partial) else None
        record = ToolCallRecord(
            cached.tool, copy.deepcopy(args), copy.deepcopy(kwargs), cached.key, cached.step,
            cached.seq, cached.index, cached.compensate, token, result, error, replayed,
        )  # fmt: skip
        self.calls.append(record)
        self._log.append(record)


class Callbacks:
    """A ``CallbackMinter`` in memory: a replay of the step finds the same
    token again (by its position), so a URL already handed out stays valid."""

    def __init__(self, records: Records, session_id: uuid.UUID, seq: int) -> None:
        self._records, self._session_id, self._seq = records, session_id, seq
        self._next_index = 0
        self.created: list[Callback] = []

    def create(self, topic: str, timeout: float | timedelta | None = None) -> Callback:
        check_topic(topic, "a callback topic")  # before anything is recorded
        check_seconds(timeout)
        index = self._next_index
        self._next_index += 1
        token = self._records.callback_at.get((self._seq, index))
        if token is None:  # shaped as the worker's: the session id in hex, then 43 characters
            material = f"{self._session_id}:{self._seq}:{index}".encode()
            secret = base64.urlsafe_b64encode(hashlib.sha256(material).digest()).decode()[:43]
            token = uuid.UUID(str(self._session_id)).hex + secret
            self._records.callback_at[(self._seq, index)] = token
        callback = Callback(token, topic, f"{PUBLIC_URL}/v1/callbacks/{token}", timeout)
        self._records.callbacks.setdefault(token, CallbackRow(callback))
        self.created.append(callback)
        return callback
