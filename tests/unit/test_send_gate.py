"""The send gate never stays shut without a thread to reopen it."""

from __future__ import annotations

import threading

import pytest

from resumable.broker.send_gate import SendGate


def test_a_gate_that_cannot_start_its_pinger_stays_open(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """At the process's thread limit ``Thread.start`` raises: the gate was
    left shut with no pinger, every later send of the process refused for
    good (found by an audit)."""
    gate = SendGate(ping=lambda: None)

    def no_thread(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    with monkeypatch.context() as patched:
        patched.setattr(threading.Thread, "start", no_thread)
        gate.shut("ConnectionError: refused")
    assert gate.shut_because() is None
    assert "no thread to ping the broker" in caplog.text
    # And with threads again, a shut gate reopens once the broker answers.
    gate.shut("ConnectionError: refused")
    assert gate.shut_because() == "ConnectionError: refused"
    deadline = threading.Event()
    for _ in range(50):
        if gate.shut_because() is None:
            break
        deadline.wait(0.1)
    assert gate.shut_because() is None
