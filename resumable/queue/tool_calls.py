"""Idempotent tool calls: a side effect happens once per logical call.

Each call made through ``ctx.tool`` gets a deterministic key from the session,
the step's sequence number and name, the call's index within the step and the
canonical JSON of its arguments. Before the tool runs, the key is claimed in
``tool_execution_cache`` under the worker's lease epoch (a worker that lost its
lease cannot start a new side effect); as soon as the tool returns, its result
is committed under the same epoch (a worker paused inside the call and resumed
after another took the session over cannot overwrite what that one recorded:
it gets ``LeaseLostError`` instead). A replay of the step after a crash finds
the recorded result and returns it without calling the tool. The one window left, a crash after the
external effect and before our record, is closed by handing the key to the
tool, so the external API can dedupe on it.

An async tool's result is recorded the same way, on a database thread, but
the step is not held up for it: ``await ctx.tool(...)`` returns the result
as soon as it is validated, and the record is queued at once. When the step
returns before a database thread has taken the record (the usual case for a
step that ends with its call, one LLM call per step), the step's commit
takes it along (``COMMIT_STEP_WITH_RECORDS``): the result and the step's
outcome commit together, one statement and one round trip fewer per step.
Either way the record is written before anything else of the run: the
commit waits for a record already under way, and a step that fails, or
does not commit, has its records written first (the saga may compensate
those calls). So the crash window is what it was (a kill between the tool's
answer and the record, closed by the idempotency key), no longer than the
queue to the database threads.

A call without side effects (``side_effects=False``: a model request) is not
claimed: it changes nothing outside, so claiming it first would not stop a
re-send either (a kill between its answer and the answer's record sends it
again whatever was claimed). Its answer rides with the step's next write
instead: the next call's claim (``CLAIM_TOOL_CALL_WITH_ANSWERS``) or the
step's commit, and, if the step ends without either, is written on its own
before the failure is handled. So an answer is durable before any effect
that could act on it starts (a claim returns only once every answer made
before it is written, whichever claim carried it), and a replay returns it.
Only a step that may have records already (the first of a run whose claim
found some) claims such calls as any other, so that a replay finds them.
A call with effects may ask the same for its result (``defer_record=True``,
what the framework adapters do for tool calls, which are followed at once
by the next call or the turn's commit): claimed as usual, its result rides
with the next write, a write fewer; a kill before that write makes it again
under its key.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg

from resumable._internal import serialization
from resumable._internal.call_keys import args_hash, divergence_message
from resumable.context import accepts_idempotency_key, idempotency_key, tool_request
from resumable.errors import LeaseLostError, RateLimited, ReplayDivergedError
from resumable.limits import RateLimit
from resumable.models import tool_call_queries
from resumable.models.database import Database
from resumable.models.status import ToolCallStatus
from resumable.models.tool_call_queries import ToolCallClaim
from resumable.queue.database_threads import on_database_thread, threads_of_running_loop
from resumable.queue.failing import RecordsUnavailable, connection_lost
from resumable.queue.observing import observed_async_tool_call, observed_tool_call
from resumable.queue.rate_turns import MAX_REFUSALS_PER_CALL, RateTurns, WaitForRate

if TYPE_CHECKING:
    from resumable.context import StepContext

# The key derivation lives with the agent API (``resumable.context``), which
# ``resumable.testing`` shares; it is still importable from here.
__all__ = [
    "ToolCalls",
    "accepts_idempotency_key",
    "args_hash",
    "idempotency_key",
    "recorded_calls",
]

logger = logging.getLogger(__name__)

#: How long a failed step waits for the calls it gathered that are under way.
ABANDONED_CALL_SECONDS = 30.0
#: A wait in place ends this long before the step's time limit.
_TIME_LIMIT_MARGIN_SECONDS = 1.0


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@dataclass(frozen=True)
class _Claimed:
    """A claimed call: its key and the keyword arguments to call the tool with,
    or the recorded response of a replay."""

    key: str
    kwargs: dict[str, Any]
    #: The call's request: canonical (its key's) and as recorded (redacted).
    request: tuple[str, str] = ("", "")
    replayed: bool = False
    response: Any = None


class AnswersNotRecordedError(RuntimeError):
    """A claim that carried answers of calls without side effects failed
    (not for a lost connection, nor a lost lease): the calls after them are
    not made, and the step fails as for any error (its answers written first)."""


def _not_recorded(tool: str) -> str:
    return f"lease lost during tool call {tool!r}; its result was not recorded"


@dataclass
class _Unrecorded:
    """An async call's result on its way to the database: recorded by a
    database thread, or taken along by the step's commit, whichever is first."""

    key: str
    tool: str
    response: str  # the redacted result, encoded
    lock: threading.Lock = field(default_factory=threading.Lock)
    taken: bool = False  # by a database thread, or by the commit
    recorded: asyncio.Future[bool] | None = None


class ToolCalls:
    """The tool calls of one step execution, fenced by the worker's lease epoch."""

    def __init__(
        self,
        db: Database,
        session_id: uuid.UUID,
        epoch: int,
        step_seq: int,
        step: str,
        redact: Callable[[Any], Any] = lambda value: value,
        scrub: Callable[[str], str | None] = lambda text: text,
        turns: RateTurns | None = None,
        deadline: float | None = None,
        *,
        fresh: bool = False,
    ) -> None:
        self._db = db
        self._session_id = session_id
        self._epoch = epoch
        self._step_seq = step_seq
        self._step = step
        self._next_index = 0
        self._redact = redact
        self._scrub = scrub
        self._turns = turns or RateTurns(None)
        #: When the step's time limit runs out (``time.monotonic()``); None: no limit.
        self._deadline = deadline
        #: Async calls awaiting their tool now, and whether the step stopped.
        self._executing: set[asyncio.Future[None]] = set()
        self._abandoned = False
        self.replayed = 0
        self.executed = 0
        self._unrecorded: list[_Unrecorded] = []
        #: Results the step's commit records (``riding_records``); written on their
        #: own (``record_riding``) if the step does not commit.
        self.riding: list[_Unrecorded] = []
        #: No record of this step can exist yet (it follows a step this run
        #: committed, or its run's claim found none): the answers of calls
        #: without side effects ride with the next write instead of a claim.
        self._fresh = fresh
        #: Those answers not written yet (rows as JSON), how many claims carry
        #: some right now, and whether one of those failed.
        self._answers: list[str] = []
        self._answers_written = threading.Condition()
        #: The claim carrying some now (its thread, and the answers): one at a time.
        self._carrier: tuple[int, list[str]] | None = None
        #: Why a claim that carried some did not write them (then no later
        #: claim of this step is made): the error its followers raise.
        self._answers_lost: Callable[[str], BaseException] | None = None
        #: Those the commit is writing (``riding_answers``).
        self._sending: list[str] = []

    @property
    def made(self) -> int:
        """How many calls the step asked for (replayed, run, or failed)."""
        return self._next_index

    @property
    def unwritten(self) -> bool:
        """Whether results or answers wait for the step's commit."""
        return bool(self.riding or self._answers or self._sending)

    def _rides(self, side_effects: bool, rate_limit: RateLimit | None) -> bool:
        """Whether a call's answer rides with the next write (no claim): a
        call without side effects, in a step that has no records yet, and
        not rate-limited (a limited call's turns are bookkept on its claim)."""
        return not side_effects and self._fresh and rate_limit is None

    def call(
        self,
        tool: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        compensate: str | None = None,
        rate_limit: RateLimit | None = None,
        *,
        side_effects: bool = True,
        defer_record: bool = False,
    ) -> Any:
        index = self._take_index()
        if self._rides(side_effects, rate_limit):
            key, request, kwargs = self._prepared(index, tool, fn, args, kwargs)
            try:
                result = observed_tool_call(tool, key, fn, *args, **kwargs)
            except Exception as exc:
                self._answered(index, tool, key, request, error=exc)
                raise
            self._answered(index, tool, key, request, result=result)
            return result
        claimed = self._claim(index, tool, fn, args, kwargs, compensate)
        if claimed.replayed:
            return claimed.response
        refusals, reserved = 0, 0.0
        while True:
            if rate_limit is not None:
                reserved = self._take_turn(tool, claimed.key, rate_limit)
            try:
                result = observed_tool_call(tool, claimed.key, fn, *args, **claimed.kwargs)
            except RateLimited as refusal:
                refusals += 1
                if rate_limit is None or refusals >= MAX_REFUSALS_PER_CALL:
                    self._failed(tool, claimed.key, refusal)
                    raise
                self._refused(tool, claimed.key, rate_limit, refusal)
                continue  # and the call waits for a turn again
            except Exception as exc:
                self._failed(tool, claimed.key, exc)
                raise
            break
        if defer_record:
            self._answered(index, tool, claimed.key, claimed.request, result=result)
            recorded = result
        else:
            recorded = self._completed(tool, claimed.key, result)
        if rate_limit is not None:
            self._turns.charge(rate_limit, result, reserved)
        return recorded

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
        """The same call for an async tool, awaited on the event loop; the
        claim and the record, both short database writes, are handed to the
        loop's database threads (``database_threads.py``) so the loop never
        waits on PostgreSQL (nor on the rate limiter's Redis)."""
        # The index is taken before the first await: calls gathered concurrently
        # get their positions (and keys) in the order they were made, on every replay.
        index = self._take_index()
        if self._rides(side_effects, rate_limit):
            key, request, kwargs = self._prepared(index, tool, fn, args, kwargs)
            self._check_not_abandoned()
            try:
                result = await observed_async_tool_call(tool, key, fn, *args, **kwargs)
            except Exception as exc:
                self._answered(index, tool, key, request, error=exc)
                raise
            self._answered(index, tool, key, request, result=result)
            return result
        claimed = await on_database_thread(self._claim, index, tool, fn, args, kwargs, compensate)
        if claimed.replayed:
            return claimed.response
        # Known as under way from its turn (or, unlimited, its start) until
        # its result is on its way to the database: a step that stops
        # meanwhile waits for it (``flush``), so its record is not lost.
        under_way = asyncio.get_running_loop().create_future()
        try:
            result, reserved = await self._turns_and_call(
                tool, claimed.key, fn, args, claimed.kwargs, rate_limit, under_way
            )
            if defer_record:
                self._answered(index, tool, claimed.key, claimed.request, result=result)
                recorded = result
            else:
                recorded = await self._record_async(tool, claimed.key, result)
        finally:
            self._executing.discard(under_way)
            if not under_way.done():
                under_way.set_result(None)
        if rate_limit is not None and rate_limit.tokens is not None:
            await on_database_thread(self._turns.charge, rate_limit, result, reserved)
        return recorded

    async def _record_async(self, tool: str, key: str, result: Any) -> Any:
        """Queue an async call's result for a database thread (or the step's
        commit); off a worker's loop, record it before returning."""
        threads = threads_of_running_loop()
        if threads is None:
            return await on_database_thread(self._completed, tool, key, result)
        pending = _Unrecorded(key, tool, self._encoded_response(tool, result))
        pending.recorded = threads.run(self._record_unless_taken, pending)
        self._unrecorded.append(pending)
        self.executed += 1
        return result

    async def _turns_and_call(
        self,
        tool: str,
        key: str,
        fn: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        rate_limit: RateLimit | None,
        under_way: asyncio.Future[None],
    ) -> tuple[Any, float]:
        """Wait for the call's turn (if limited), then await the tool; made
        again at a new turn when the provider refuses it. Its result, and
        the tokens its turn reserved."""
        refusals, reserved = 0, 0.0
        while True:
            self._check_not_abandoned()
            if rate_limit is not None:
                try:
                    reserved = await self._turns.await_turn(
                        rate_limit,
                        self._max_wait(rate_limit),
                        on_granted=lambda: self._executing.add(under_way),
                    )
                except WaitForRate:
                    # The step stops here, but not before the calls gathered
                    # with this one that hold a turn are made and recorded:
                    # a turn is never wasted, and the next run goes further.
                    self._executing.discard(under_way)
                    await self._others_settled()
                    await on_database_thread(self._not_made, tool, key)
                    raise
            self._executing.add(under_way)
            try:
                return await observed_async_tool_call(tool, key, fn, *args, **kwargs), reserved
            except RateLimited as refusal:
                refusals += 1
                if rate_limit is None or refusals >= MAX_REFUSALS_PER_CALL:
                    await on_database_thread(self._failed, tool, key, refusal)
                    raise
                await on_database_thread(self._refused, tool, key, rate_limit, refusal)
            except Exception as exc:
                await on_database_thread(self._failed, tool, key, exc)
                raise

    async def _others_settled(self) -> None:
        """Wait (bounded) for the calls under way in this step to end."""
        if not self._executing:
            return
        _, late = await asyncio.wait(set(self._executing), timeout=ABANDONED_CALL_SECONDS)
        if late:
            logger.warning(
                "%d tool call(s) of a stopped step still running after %.0f s; "
                "their results will not be recorded",
                len(late),
                ABANDONED_CALL_SECONDS,
            )

    def _check_not_abandoned(self) -> None:
        """A call gathered with one that stopped the step (a failure, a far
        turn) does not start once the step is being handled: its session's
        next run makes it, under the same key."""
        if self._abandoned:
            raise asyncio.CancelledError("the step stopped before this call started")

    def _max_wait(self, limit: RateLimit) -> float:
        """How long a call may wait in place for a turn: the limit's
        ``wait_in_place``, within what is left of the step's time limit, and
        none for a sync call inside an ``async def`` step (it runs on the
        event loop, which must not sleep)."""
        wait = limit.wait_in_place
        if self._deadline is not None:
            wait = min(wait, self._deadline - time.monotonic() - _TIME_LIMIT_MARGIN_SECONDS)
        return max(wait, 0.0)

    def _take_turn(self, tool: str, key: str, limit: RateLimit) -> float:
        """A sync call's turn, waited for on this thread; the tokens it reserved."""
        max_wait = self._max_wait(limit)
        if _on_event_loop():
            max_wait = 0.0
        try:
            return self._turns.wait(limit, max_wait)
        except WaitForRate:
            self._not_made(tool, key)
            raise

    def _refused(self, tool: str, key: str, limit: RateLimit, refusal: RateLimited) -> None:
        try:
            self._turns.refused(limit, refusal)
        except WaitForRate:
            self._not_made(tool, key)
            raise

    @contextlib.contextmanager
    def _records(self, tool: str) -> Iterator[psycopg.Connection[Any]]:
        """A connection for the call's bookkeeping, whose loss is ours, not
        the step's (``RecordsUnavailable``)."""
        try:
            with self._db.connection() as conn:
                yield conn
        except psycopg.OperationalError as exc:
            if not connection_lost(exc):
                raise
            raise RecordsUnavailable(
                f"the database failed under the records of tool call {tool!r}: {exc}"
            ) from exc

    def _not_made(self, tool: str, key: str) -> None:
        """The call stopped for a turn before it ran: its record says so
        (failed, never made), so a replay that makes fewer calls is not
        taken for one that forgot a call whose effect may have happened."""
        error = {
            "type": "WaitForRate",
            "message": f"not made: waiting for a turn of its rate limit ({tool!r})",
            "traceback": None,
        }
        if not self._record_failure(tool, key, error):
            raise LeaseLostError(f"lease lost before tool call {tool!r}")

    def _record_unless_taken(self, pending: _Unrecorded) -> bool:
        """On a database thread: record `pending`, unless the commit took it."""
        with pending.lock:
            if pending.taken:
                return True
            pending.taken = True
        return self._record_response(pending)

    def _record_response(self, pending: _Unrecorded) -> bool:
        recorded = self._complete(pending.tool, pending.key, pending.response)
        if not recorded:
            logger.warning(_not_recorded(pending.tool), extra={"action": "lease_lost"})
        return recorded

    async def settle_for_commit(self) -> None:
        """After the step returned: results no database thread has taken yet
        go with the commit (``riding``); the commit waits for those under way.
        Raises ``LeaseLostError`` if one of those found the lease gone."""
        under_way: list[_Unrecorded] = []
        for pending in self._unrecorded:
            with pending.lock:
                if pending.taken:
                    under_way.append(pending)
                else:
                    pending.taken = True
                    self.riding.append(pending)
        self._unrecorded = []
        try:
            for pending in under_way:
                assert pending.recorded is not None
                if not await pending.recorded:
                    raise LeaseLostError(_not_recorded(pending.tool))
        except BaseException:
            await on_database_thread(self.record_riding)
            raise

    async def flush(self) -> None:
        """After the step raised: every result recorded before the failure is
        handled (its compensation needs the record). Calls it gathered and
        left behind are waited for when under way (their effect may happen:
        it is recorded under this run's lease), and do not start if not."""
        self._abandoned = True
        await self._others_settled()
        pending, self._unrecorded = self._unrecorded, []
        unavailable: RecordsUnavailable | None = None
        for call in pending:
            assert call.recorded is not None
            try:
                await call.recorded
            except RecordsUnavailable as exc:  # then the failure is ours, not the step's
                unavailable = exc
            except Exception:  # the step's own failure is what is handled
                logger.exception("recording the result of tool call %r failed", call.tool)
        if unavailable is not None:
            raise unavailable

    def riding_records(self) -> tuple[str | None, list[str] | None]:
        """The results the commit records: ``COMMIT_STEP_WITH_RECORDS``'s
        ``records`` ({key: response} as JSON) and ``record_keys`` (None, None:
        none ride)."""
        if not self.riding:
            return None, None
        entries = [f"{serialization.dumps(p.key)}:{p.response}" for p in self.riding]
        return "{" + ",".join(entries) + "}", [p.key for p in self.riding]

    def riding_answers(self) -> str | None:
        """The answers the commit writes (a JSON array of rows; None: none),
        set apart until it is known whether it wrote them."""
        with self._answers_written:
            self._sending, self._answers = self._sending + self._answers, []
            return "[" + ",".join(self._sending) + "]" if self._sending else None

    def committed(self) -> None:
        """The commit took the riding results and the answers it was given
        along (not one a call left running may have added since)."""
        self.riding = []
        with self._answers_written:
            self._sending = []

    def record_riding(self) -> None:
        """Record, each on its own, the results and answers a commit did not
        take along (the step did not commit: parked, rolled back, failed)."""
        riding, self.riding = self.riding, []
        for pending in riding:
            self._record_response(pending)
        self.write_answers()

    def write_answers(self) -> None:
        """Write the answers not written yet, on their own (the step ends
        without a write for them to ride: it failed, or waits for a turn)."""
        with self._answers_written:
            answers, self._sending, self._answers = self._sending + self._answers, [], []
        if not answers:
            return
        with self._records("answers of calls without side effects") as conn:
            owned = tool_call_queries.record_answers(
                conn, self._session_id, self._epoch, "[" + ",".join(answers) + "]"
            )
        if not owned:
            logger.warning(
                "lease lost: %d answer(s) of calls without side effects not recorded",
                len(answers),
                extra={"action": "lease_lost"},
            )

    def _prepared(
        self,
        index: int,
        tool: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> tuple[str, tuple[str, str], dict[str, Any]]:
        """A call's key, its request (canonical and as recorded) and the
        keyword arguments to call it with (the key added where `fn` takes it)."""
        key, request = self._identity(index, tool, args, kwargs)
        if accepts_idempotency_key(fn):
            kwargs = {**kwargs, "idempotency_key": key}
        return key, request, kwargs

    def _identity(
        self, index: int, tool: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[str, tuple[str, str]]:
        """A call's idempotency key and its request: canonical (the key's and
        the divergence check's) and as recorded (redacted)."""
        canonical = tool_request(tool, args, kwargs)
        key = idempotency_key(self._session_id, self._step_seq, self._step, index, tool, canonical)
        recorded = serialization.dumps(self._redact({"args": list(args), "kwargs": kwargs}))
        return key, (canonical, recorded)

    def _answered(
        self,
        index: int,
        tool: str,
        key: str,
        request: tuple[str, str],
        *,
        result: Any = None,
        error: Exception | None = None,
    ) -> None:
        """Keep a riding call's answer (or failure), or a deferred result, for
        the step's next write."""
        canonical, recorded = request
        if error is None:
            status, response, failure = "completed", self._encoded_response(tool, result), "null"
        else:
            status, response = "failed", "null"
            failure = serialization.dumps(self._error(error))
        fixed = serialization.dumps(
            {
                "key": key,
                "step_seq": self._step_seq,
                "step": self._step,
                "call_index": index,
                "tool": tool,
                "status": status,
                "args_hash": args_hash(canonical),
            }
        )
        row = f'{fixed[:-1]},"request":{recorded},"response":{response},"error":{failure}}}'
        with self._answers_written:
            self._answers.append(row)
        if error is None:
            self.executed += 1

    def _take_answers(self, tool: str) -> list[str]:
        """The answers a claim carries, once no other claim carries any: a
        claim is written only after every answer made before it (so no call
        starts, nor is even claimed, on an answer a replay would not return).
        Raises if a claim that carried some did not write them."""
        me = threading.get_ident()
        with self._answers_written:
            if self._carrier is not None and self._carrier[0] == me:
                # This thread's carrying claim was interrupted where it could
                # not say how it ended (a time limit raised into the thread).
                self._answers_dropped(RecordsUnavailable)
            self._answers_written.wait_for(lambda: self._carrier is None)
            if self._answers_lost is not None:
                raise self._answers_lost(
                    f"tool call {tool!r} not started: answers made before it were not recorded"
                )
            answers, self._answers = self._answers, []
            if answers:
                self._carrier = (me, answers)
            return answers

    def _answers_carried(self, *, lost: BaseException | None = None, fenced: bool = False) -> None:
        """The claim this thread made is done (`lost`: it raised; `fenced`:
        the lease was gone): if it carried answers it did not write, they
        stay pending and no later claim of this step is made."""
        with self._answers_written:
            if self._carrier is None or self._carrier[0] != threading.get_ident():
                return
            if fenced:
                self._answers_dropped(LeaseLostError)
            elif isinstance(lost, RecordsUnavailable):
                self._answers_dropped(RecordsUnavailable)
            elif lost is not None:
                self._answers_dropped(AnswersNotRecordedError)
            self._carrier = None
            self._answers_written.notify_all()

    def _answers_dropped(self, error: Callable[[str], BaseException]) -> None:
        """(Holding the lock) The carrier's answers were not written: back
        to pending (a failed step writes them on their own), the carrier
        gone, and every later claim of the step raising `error`."""
        assert self._carrier is not None
        self._answers = self._carrier[1] + self._answers
        self._answers_lost = error
        self._carrier = None
        self._answers_written.notify_all()

    def _take_index(self) -> int:
        index = self._next_index
        self._next_index += 1
        return index

    def _claim(
        self,
        index: int,
        tool: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        compensate: str | None,
    ) -> _Claimed:
        """Claim the call's key under the epoch: a recorded result to replay,
        or the go-ahead to call the tool (with the key to hand it)."""
        key, (request, recorded), call_kwargs = self._prepared(index, tool, fn, args, kwargs)
        try:
            answers = self._take_answers(tool)
            row = self._claim_row(index, tool, compensate, key, (request, recorded), answers)
        except BaseException as exc:
            self._answers_carried(lost=exc)
            raise
        self._answers_carried(fenced=not row.owned)
        if not row.owned:
            raise LeaseLostError(f"lease lost before tool call {tool!r}")
        if row.other_key is not None:
            raise ReplayDivergedError(self._divergence(row, index, tool, request, args, kwargs))
        if row.status is None and row.recorded_status is ToolCallStatus.COMPLETED:
            self.replayed += 1
            return _Claimed(key, kwargs, replayed=True, response=row.recorded_response)
        return _Claimed(key, call_kwargs, (request, recorded))

    def _claim_row(
        self,
        index: int,
        tool: str,
        compensate: str | None,
        key: str,
        request: tuple[str, str],
        answers: list[str],
    ) -> ToolCallClaim:
        canonical, recorded = request
        with self._records(tool) as conn:
            return tool_call_queries.claim_tool_call(
                conn,
                self._session_id,
                self._epoch,
                key=key,
                step_seq=self._step_seq,
                step=self._step,
                call_index=index,
                tool=tool,
                request=recorded,
                compensation=compensate,
                args_hash=args_hash(canonical),
                answers="[" + ",".join(answers) + "]" if answers else None,
            )

    def _error(self, exc: Exception) -> dict[str, Any]:
        return {
            "type": serialization.storable_text(type(exc).__name__),
            "message": self._scrub(serialization.exception_text(exc)),
            "traceback": self._scrub(serialization.traceback_text(exc)),
        }

    def _failed(self, tool: str, key: str, exc: Exception) -> None:
        error = self._error(exc)
        if not self._record_failure(tool, key, error):
            raise LeaseLostError(f"lease lost during tool call {tool!r}") from exc

    def _record_failure(self, tool: str, key: str, error: dict[str, Any]) -> bool:
        """Record the call as failed under this epoch; False if the epoch moved on."""
        with self._records(tool) as conn:
            return tool_call_queries.fail_tool_call(conn, self._session_id, key, self._epoch, error)

    def _encoded_response(self, tool: str, result: Any) -> str:
        serialization.dumps(result, f"result of tool {tool!r}")
        # Recorded redacted: a replay returns secret fields as "[REDACTED]".
        return serialization.dumps(self._redact(result))

    def _completed(self, tool: str, key: str, result: Any) -> Any:
        response = self._encoded_response(tool, result)
        if not self._complete(tool, key, response):
            raise LeaseLostError(_not_recorded(tool))
        self.executed += 1
        return result

    def _divergence(
        self,
        row: ToolCallClaim,
        index: int,
        tool: str,
        request: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> dict[str, Any]:
        """The reason a session is blocked: what was recorded at this position,
        and what the code asks for now (arguments redacted, as recorded)."""
        requested = self._redact({"args": list(args), "kwargs": kwargs})
        return {
            "kind": "tool_call_diverged",
            "step": self._step,
            "step_seq": self._step_seq,
            "call_index": index,
            "message": divergence_message(
                self._step, index, row.other_tool or "", tool, row.other_request, requested
            ),
            "recorded": {
                "tool": row.other_tool,
                "args_hash": row.other_args_hash,
                "request": row.other_request,
                "status": row.other_status,
                "idempotency_key": row.other_key,
            },
            "requested": {
                "tool": tool,
                "args_hash": args_hash(request),
                "request": requested,
            },
        }

    def _complete(self, tool: str, key: str, response: str) -> bool:
        """Record a call's result (encoded) under this epoch; False if the epoch moved on."""
        with self._records(tool) as conn:
            return tool_call_queries.complete_tool_call(
                conn, self._session_id, key, self._epoch, response
            )


def recorded_calls(ctx: StepContext) -> ToolCalls:
    """The worker's own records behind a context it built (the agent API
    knows only the ``ToolCallRecorder`` protocol)."""
    tools = ctx.tool_calls
    if not isinstance(tools, ToolCalls):
        raise TypeError(f"a worker's step context records its calls with ToolCalls, not {tools!r}")
    return tools
