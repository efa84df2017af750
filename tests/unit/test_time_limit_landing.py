"""Where a step's time limit lands: never inside a shielded region (it lands
as the region ends), and never leaving logging's locks held. Real threads,
real locks and a real psycopg_pool waiter; no database needed."""

from __future__ import annotations

import io
import logging
import threading
import time

from psycopg_pool.pool import WaitingClient

from resumable._internal.interrupt_shield import shielded
from resumable.errors import StepTimeoutError
from resumable.queue.time_limits import TimeLimit


def _in_thread(body: object) -> dict[str, object]:
    """Run `body` under a 0.2 s limit on a thread; what it raised and when."""
    out: dict[str, object] = {}

    def step() -> None:
        try:
            with TimeLimit(0.2):
                body()  # type: ignore[operator]
                out["finished_body"] = time.monotonic()
        except StepTimeoutError as exc:
            out["raised"] = exc
            out["raised_at"] = time.monotonic()

    thread = threading.Thread(target=step)
    thread.start()
    out["thread"] = thread
    return out


def test_a_limit_that_fires_in_a_shielded_region_lands_as_it_ends() -> None:
    released = threading.Event()
    progress: list[str] = []

    def body() -> None:
        with shielded():
            released.wait(5)  # the limit fires meanwhile (a pool wait, say)
            for _ in range(1000):  # bytecodes in the region: none is interrupted
                progress.append("x")
            progress.append("region done")
        time.sleep(5)  # the step's own code: interrupted at its next bytecode
        progress.append("after")

    out = _in_thread(body)
    time.sleep(0.5)
    released.set()
    thread = out["thread"]
    assert isinstance(thread, threading.Thread)
    thread.join(10)
    assert not thread.is_alive()
    assert isinstance(out.get("raised"), StepTimeoutError)
    assert progress[-1] == "region done" and len(progress) == 1001


def test_a_limit_in_an_unshielded_wait_still_lands_at_once() -> None:
    def body() -> None:
        for _ in range(100):
            time.sleep(0.05)

    started = time.monotonic()
    out = _in_thread(body)
    thread = out["thread"]
    assert isinstance(thread, threading.Thread)
    thread.join(10)
    assert isinstance(out.get("raised"), StepTimeoutError)
    raised_at = out["raised_at"]
    assert isinstance(raised_at, float) and raised_at - started < 1.0


def test_a_shielded_pool_wait_keeps_the_connection_it_is_handed() -> None:
    """psycopg_pool's waiter catches Exception only: a limit landing in its
    wait left it queued, and the connection the pool later handed it was
    never returned (the pool shrank by one for good)."""
    waiter = WaitingClient()
    got: list[object] = []

    def body() -> None:
        with shielded():  # as Database.connection does
            got.append(waiter.wait(timeout=5.0))

    out = _in_thread(body)
    time.sleep(0.5)  # the limit fired at 0.2 s
    connection = object()
    assert waiter.set(connection)  # type: ignore[arg-type]  # the pool hands it a connection
    thread = out["thread"]
    assert isinstance(thread, threading.Thread)
    thread.join(10)
    assert got == [connection]  # taken by the step, which would give it back
    assert isinstance(out.get("raised"), StepTimeoutError)


def test_a_limit_that_fires_while_waiting_to_log_leaves_the_handler_unlocked() -> None:
    handler = logging.StreamHandler(io.StringIO())
    log = logging.getLogger("tests.time_limit_landing")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    try:
        handler.acquire()  # another thread is writing a line
        out = _in_thread(lambda: log.info("a line from the step"))
        time.sleep(0.5)  # the limit fires while the step waits for the lock
        handler.release()
        thread = out["thread"]
        assert isinstance(thread, threading.Thread)
        thread.join(5)
        assert isinstance(out.get("raised"), StepTimeoutError)
        # Every other thread can still log (before: the lock stayed the
        # step thread's, and the whole worker froze at its next line).
        assert handler.lock is not None and handler.lock.acquire(timeout=2)
        handler.lock.release()
    finally:
        log.removeHandler(handler)
