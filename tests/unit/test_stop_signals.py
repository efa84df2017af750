"""A stop signal handler takes no lock: it runs between two bytecodes of the
main thread, which may hold the lock of the very event the stop sets."""

from __future__ import annotations

import signal
import threading

from resumable._internal.stop_signals import StopSignals


def test_a_signal_is_taken_while_its_thread_holds_the_events_lock() -> None:
    stop, signals = threading.Event(), StopSignals()
    # As when a second SIGTERM arrives inside the first handler's Event.set:
    # calling stop.set() here would wait for ever on a lock this thread holds.
    with stop._cond:  # type: ignore[attr-defined]
        signals.handle(signal.SIGTERM, None)
        signals.handle(signal.SIGINT, None)
    assert signals.first == "SIGTERM"
    assert signals.wait(stop, timeout=1.0)
    assert not stop.is_set()


def test_wait_ends_when_the_event_is_set_or_the_time_is_up() -> None:
    stop, signals = threading.Event(), StopSignals()
    assert not signals.wait(stop, timeout=0.25)
    threading.Timer(0.05, stop.set).start()
    assert signals.wait(stop, timeout=5.0)
    assert signals.first is None
