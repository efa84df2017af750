"""One asyncio event loop per worker process, on a thread of its own.

Async steps, tools, checks and compensations are awaited here. The loop never
runs blocking work itself: every database write (tool-call claims, step
commits, retries) is handed to a few database threads of its own
(``database_threads.py``); sync steps met by a run on the loop, and the
failure handling that may run compensations, go to a second pool, so neither
a slow sync step nor a saga can take the database threads away. The loop's
default executor (what ``asyncio.to_thread`` in agent code uses) is neither.

A blocking call inside an ``async def`` step (``time.sleep``, ``requests``)
would stall every other session on the loop. A watchdog thread notices a loop
that has not ticked for ``RESUMABLE_LOOP_LAG_WARNING_SECONDS`` and tells three
causes apart before it blames anyone (see ``_Spell``): one step holding the
loop (a blocking call: the step is named), a busy loop (hundreds of tasks,
each quick, the loop's rounds long) and a process starved of CPU (the loop's
thread runnable but not running, or the watchdog itself not woken on time).
Only the first is a step's fault; the other two are said at most once a
minute, naming no step. Leases are renewed by the lease keeper's own thread,
so a stalled loop does not cost the other sessions their leases.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from resumable._internal import procfs
from resumable.queue.database_threads import DatabaseThreads

logger = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")

# How often the loop says it is alive (the watchdog's resolution).
_TICK_SECONDS = 0.1
# A watchdog that wakes this much later than it asked was not given a CPU (or
# the GIL) on time: what it saw meanwhile is only what the clocks say.
_LATE_SECONDS = 0.15
# A loop thread in a system call (state S or D) using less of a core than this
# is asleep in that call: its wait is the holder's, starved or not.
_ASLEEP_CPU_SHARE = 0.05
# A loop thread that is not asleep and got less of a core than this is starved.
_STARVED_CPU_SHARE = 0.5
# A busy or starved loop is said at most this often (each is counted always).
_NOTICE_SECONDS = 60.0


class EventLoopThread:
    """The worker's event loop, started on first use and stopped with the worker."""

    def __init__(
        self,
        *,
        db_threads: int,
        step_threads: int,
        lag_warning_seconds: float = 1.0,
        describe_task: Callable[[asyncio.Task[Any]], str | None] = lambda task: None,
    ) -> None:
        self._db_threads = db_threads
        self._step_threads = step_threads
        self._lag_warning = lag_warning_seconds
        self._describe_task = describe_task
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._watchdog: threading.Thread | None = None
        self._steps: concurrent.futures.ThreadPoolExecutor | None = None
        self._database: DatabaseThreads | None = None
        self._last_tick = time.monotonic()
        self._late_tick = 0.0  # the latest tick's lateness, if the watchdog has not read it
        self._stop = threading.Event()
        #: Times the watchdog found a blocking call holding the loop (for tests
        #: and metrics); a busy or a starved loop is not one.
        self.stalls = 0
        #: Spells of lag from many quick tasks, and from a lack of CPU.
        self.busy_spells = 0
        self.starved_spells = 0
        self._noticed: dict[str, tuple[float, int]] = {}  # kind -> (said at, unsaid since)
        self._root: asyncio.Task[None] | None = None  # see ``_start``
        self._finished: asyncio.Future[None] | None = None  # ends the root task

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop (started now if it was not)."""
        with self._lock:
            if self._loop is None:
                self._start()
            assert self._loop is not None
            return self._loop

    def _start(self) -> None:
        loop = asyncio.new_event_loop()
        self._database = DatabaseThreads(loop, self._db_threads)
        self._steps = concurrent.futures.ThreadPoolExecutor(
            self._step_threads, thread_name_prefix="resumable-sync-step"
        )
        ready = threading.Event()
        finished = loop.create_future()
        self._finished = finished

        async def root() -> None:
            """The loop's one long-lived task, until ``stop``. anyio (which
            PydanticAI, among others, uses to run sync code on threads) looks
            for the task the loop was started with: found, it keeps its
            worker threads for the loop's life. A loop run forever has no
            such task, and then every ``to_thread`` call scanned all the
            loop's tasks and tied a new thread to the short-lived task that
            made the call (stopped when that task ended): a thread started
            per sync call of a framework agent, with hundreds of sessions in
            flight."""
            await finished

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.call_soon(self._tick, loop)
            self._root = loop.create_task(root(), name="resumable-event-loop-root")
            loop.run_until_complete(self._root)

        self._thread = threading.Thread(target=run, name="resumable-event-loop", daemon=True)
        self._thread.start()
        ready.wait()
        self._loop = loop
        self._watchdog = threading.Thread(
            target=self._watch, name="resumable-loop-watchdog", daemon=True
        )
        self._watchdog.start()

    @property
    def started(self) -> bool:
        return self._loop is not None

    @property
    def thread(self) -> threading.Thread | None:
        """The loop's thread once started (a vital: see ``vitals.py``)."""
        return self._thread

    def on_loop(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run `coro` as a task on the loop; the calling thread's context
        (its log context) goes with it."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def wait(self, awaitable: Awaitable[T]) -> T:
        """Await `awaitable` on the loop and block this (non-loop) thread for
        its result: how a sync caller (a poll check, a compensation) runs an
        async function."""
        if self.on_loop():
            raise RuntimeError("EventLoopThread.wait called on the loop itself")

        async def await_it() -> T:
            return await awaitable

        return self.submit(await_it()).result()

    async def in_step_thread(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a sync step from a run on the loop, on the sync-step threads,
        in the caller's context (log context, session)."""
        assert self._steps is not None
        context = contextvars.copy_context()
        call = functools.partial(context.run, fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._steps, call)

    @property
    def database(self) -> DatabaseThreads:
        """The loop's database threads (the loop is started if it was not)."""
        self.loop  # noqa: B018 (starts it)
        assert self._database is not None
        return self._database

    # -- the watchdog -----------------------------------------------------------------

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        now = time.monotonic()
        # Its own lateness, for a stall the watchdog could not see: a C call
        # that held the GIL, after which this thread got it back first.
        self._late_tick = max(self._late_tick, now - self._last_tick - _TICK_SECONDS)
        self._last_tick = now
        if not self._stop.is_set():
            loop.call_later(_TICK_SECONDS, self._tick, loop)

    def _watch(self) -> None:
        loop, thread = self._loop, self._thread
        assert loop is not None and thread is not None and thread.ident is not None
        clock = _cpu_clock(thread.ident)
        now = self._sample(loop, clock)
        spell: _Spell | None = None
        while not self._stop.wait(_TICK_SECONDS) and thread.is_alive():
            before, now = now, self._sample(loop, clock)
            lag = now.at - now.ticked
            late_tick, self._late_tick = self._late_tick, 0.0
            if lag < min(self._lag_warning, 2 * _TICK_SECONDS):
                if spell is None and _held_unseen(before, now, late_tick, self._lag_warning):
                    self._blame(_Spell(None), late_tick)
                spell = None  # the loop ticks
                continue
            spell = spell or _Spell(before.task)
            spell.add(before, now, _thread_state(thread.native_id))
            if lag < self._lag_warning:
                continue
            if spell.held >= self._lag_warning:
                self._blame(spell, lag)
            elif not spell.noticed:
                self._notice(spell, lag, loop)

    def _sample(self, loop: asyncio.AbstractEventLoop, clock: int | None) -> _Sample:
        # The clocks, the last tick and the current task first, together: the
        # /proc read lets the loop run (it releases the GIL), and a tick read
        # after it would be newer than the task.
        at, ticked, task = time.monotonic(), self._last_tick, asyncio.current_task(loop)
        return _Sample(at, ticked, task, _cpu_seconds(clock), _queued_seconds())

    def _blame(self, spell: _Spell, lag: float) -> None:
        """A blocking call: name the step that holds the loop."""
        if spell.reported and lag < spell.reported * 2:
            return  # said already; say it again when it doubles
        spell.reported = lag
        self.stalls += 1
        task = spell.holder
        what = (self._describe_task(task) if task is not None else None) or (
            "a call that held the GIL throughout (the watchdog could not see which step)"
        )
        logger.warning(
            "the event loop has been blocked for %.1f s by %s: a blocking call inside "
            "an async step stalls every async session of this worker (use an async "
            "client or asyncio.to_thread)",
            lag,
            what,
            extra={"action": "event_loop_blocked", "blocked_by": what},
        )

    def _notice(self, spell: _Spell, lag: float, loop: asyncio.AbstractEventLoop) -> None:
        """A busy or starved loop: counted, and said at most once a minute."""
        kind = spell.cause()
        if kind is None:
            return  # too soon to tell
        spell.noticed = True
        if kind == "starved":
            self.starved_spells += 1
        else:
            self.busy_spells += 1
        said_at, unsaid = self._noticed.get(kind, (-_NOTICE_SECONDS, 0))
        if time.monotonic() - said_at < _NOTICE_SECONDS:
            self._noticed[kind] = (said_at, unsaid + 1)
            return
        self._noticed[kind] = (time.monotonic(), 0)
        also = f" ({unsaid} more such spell(s) since the last line)" if unsaid else ""
        if kind == "starved":
            logger.warning(
                "this worker process is starved of CPU: its event loop has lagged %.1f s, "
                "its thread running for %.1f s of the last %.1f s; no step is to blame "
                "(the machine or the container is overloaded, or the process was paused)%s",
                lag,
                spell.cpu,
                spell.wall,
                also,
                extra={"action": "event_loop_starved", "lag_seconds": round(lag, 3)},
            )
            return
        try:
            # A copy made safe to take from here; the loop's own root task is not work.
            tasks = len(asyncio.all_tasks(loop) - {self._root})
        except RuntimeError:  # the loop changed its tasks under every try
            tasks = 0
        logger.warning(
            "the event loop is busy: %d tasks, and it has lagged %.1f s running them; no "
            "step holds it (each yields): the process has more async work than one loop "
            "runs on time (lower RESUMABLE_MAX_INFLIGHT, or run more worker processes)%s",
            tasks,
            lag,
            also,
            extra={"action": "event_loop_busy", "tasks": tasks, "lag_seconds": round(lag, 3)},
        )

    # -- stopping ---------------------------------------------------------------------

    def stop(self, timeout: float = 5.0) -> None:
        """Cancel what is still on the loop and stop it (the worker is exiting)."""
        self._stop.set()
        loop = self._loop
        if loop is None or self._thread is None:
            return

        async def cancel_all() -> None:
            tasks = [
                task
                for task in asyncio.all_tasks()
                if task is not asyncio.current_task() and task is not self._root
            ]
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks, timeout=timeout) if tasks else None

        try:
            asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(timeout + 1)
        except Exception:
            logger.warning("tasks still on the event loop at exit", exc_info=True)
        loop.call_soon_threadsafe(_settle, self._finished)
        self._thread.join(timeout)
        if self._watchdog is not None:
            self._watchdog.join(timeout)  # what it saw last is said (and counted)
        if self._steps is not None:
            self._steps.shutdown(wait=False, cancel_futures=True)
        if self._database is not None:
            self._database.stop(timeout)
        if not self._thread.is_alive():
            loop.close()


def _settle(future: asyncio.Future[None] | None) -> None:
    if future is not None and not future.done():
        future.set_result(None)


@dataclass(frozen=True)
class _Sample:
    """The loop's thread at one of the watchdog's wake-ups (taken on the watchdog's)."""

    at: float  # monotonic
    ticked: float  # when the loop last ticked
    task: asyncio.Task[Any] | None  # the loop's current task
    cpu: float | None  # the loop thread's CPU seconds (None: no clock for it here)
    queued: float | None  # the watchdog's own seconds runnable but not running


class _Spell:
    """What the watchdog saw of the loop's thread since the loop last ticked.

    Each interval between two of its wake-ups counts toward the task that was
    current at both ends (`holder`): its wall time if the thread was asleep in
    a system call (``time.sleep``, a blocking socket, a lock) and the watchdog
    woke on time, its CPU time otherwise. So a task is charged for what it did
    itself, never for the CPU the machine did not give the thread, nor for
    other tasks' turns (the current task changes), nor for a gap the watchdog
    was not there to see (asleep or not: a paused or starved process). One
    exception: a watchdog that woke late although it was not kept waiting for a
    CPU was kept from the GIL (or the process was paused): what the loop's
    thread did meanwhile (a C call holding the GIL: its CPU) was done in one
    go by the task current when the watchdog got in, which is charged it.
    """

    def __init__(self, holder: asyncio.Task[Any] | None) -> None:
        self.holder = holder
        self.held = 0.0  # how long `holder` has held the loop
        self.wall = self.cpu = self.asleep = 0.0  # the spell's totals
        self.switches = 0
        self.reported = 0.0  # the lag last reported as a blocking call
        self.noticed = False  # said (or counted) as busy or starved

    def add(self, before: _Sample, now: _Sample, state: str) -> None:
        """The interval from `before` to `now`, at whose end the thread's
        state was `state`."""
        task, wall = now.task, now.at - before.at
        late = wall > _TICK_SECONDS + _LATE_SECONDS
        if now.cpu is None or before.cpu is None:  # no CPU clock here: the wall clock alone
            cpu = 0.0 if late else wall
        else:
            cpu = now.cpu - before.cpu
        # Where /proc says nothing (""), a thread that used no CPU was asleep.
        sleeping = state in ("S", "D", "")
        asleep = not late and sleeping and cpu < _ASLEEP_CPU_SHARE * wall
        # Kept from the GIL, not from a CPU: the loop's thread ran for most of
        # the interval, or the watchdog spent most of its delay off the run queue.
        kept_out = cpu >= _STARVED_CPU_SHARE * wall or (
            now.queued is not None
            and before.queued is not None
            and now.queued - before.queued < 0.5 * (wall - _TICK_SECONDS)
        )
        one_c_call = late and kept_out
        self.wall += wall
        self.cpu += cpu
        self.asleep += wall if asleep else 0.0
        if task is not self.holder:
            self.switches += 1
            self.holder, self.held = task, 0.0
            if not one_c_call:
                return
        self.held += wall if asleep else cpu

    def cause(self) -> str | None:
        """Why the loop lags: "starved", "busy", or None (too soon to tell)."""
        awake = self.wall - self.asleep
        if awake >= 0.5 * self.wall and self.cpu < _STARVED_CPU_SHARE * awake:
            return "starved"
        return "busy" if self.switches else None


def _held_unseen(before: _Sample, now: _Sample, late_tick: float, warning: float) -> bool:
    """Whether the loop stalled for `late_tick` seconds between two of the
    watchdog's looks that both found it ticking: the watchdog was kept from
    the GIL for the whole stall, and the loop's thread got it back first. Its
    CPU time tells a call that held the GIL (it computed all along) from a
    paused or starved process (it did not)."""
    if late_tick < warning or now.cpu is None or before.cpu is None:
        return False
    return now.cpu - before.cpu >= _STARVED_CPU_SHARE * late_tick


def _cpu_clock(ident: int) -> int | None:
    """The CPU-time clock of thread `ident` (None where there is none)."""
    try:
        return time.pthread_getcpuclockid(ident)
    except (AttributeError, OSError):
        return None


def _cpu_seconds(clock: int | None) -> float | None:
    if clock is None:
        return None
    try:
        return time.clock_gettime(clock)
    except OSError:
        return None  # the thread is gone


def _queued_seconds() -> float | None:
    """How long the calling thread has been runnable without a CPU, in all
    (the kernel's run delay: the second field of its ``schedstat``)."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as stats:
            return int(stats.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def _thread_state(native_id: int | None) -> str:
    """The kernel's state letter for a thread of this process ("R" running or
    runnable, "S"/"D" asleep in a call, ...), "" where unknown.
    ``/proc/TID/stat`` is the thread's own (``/proc/self/task/TID/stat``)."""
    fields = procfs.stat_fields(native_id) if native_id is not None else None
    return fields[procfs.STATE] if fields else ""


def resolve(value: Any, loop: EventLoopThread | None) -> Any:
    """`value`, or, if a sync caller got an awaitable (an async check or
    compensation called from a worker thread), its result, awaited on the
    worker's loop (or on a loop of its own when there is none)."""
    if not inspect.isawaitable(value):
        return value

    async def await_it() -> Any:
        return await value

    if loop is not None:
        return loop.wait(value)
    return asyncio.run(await_it())
