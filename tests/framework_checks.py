"""Assertions both framework integrations' tests make."""

from __future__ import annotations

from typing import Any

PENDING_REFUND = [
    {"id": "call_2", "tool": "refund", "args": {"order": "o1", "amount": 30}, "kind": "approval"}
]


def assert_crashes_repeated_nothing(seen: dict[str, Any]) -> None:
    """After a SIGKILL in the second model request and one in the refund tool:
    the first request (which had returned) was not sent again, only the one
    in flight was; each effect happened once (the refund tool ran again after
    the kill, with the same key, and the API deduplicated it); the output is
    the uncrashed run's."""
    assert seen["pending"] == PENDING_REFUND
    assert seen["turns"] == {0: 1, 1: 2, 2: 1}
    assert seen["effects"] == ["/lookup", "/refund"]
    assert sorted(seen["calls"].values()) == [1, 2]
    crashed, clean = seen["result"], seen["clean"]
    assert crashed.startswith("Done: refunded 30 as ")
    assert crashed.rsplit(" ", 1)[0] == clean.rsplit(" ", 1)[0]
    assert seen["events"].count("lease_recovered") >= 1


_VOLATILE = {"timestamp", "request_timestamp", "duration", "run_id", "conversation_id"}


def without_clock(value: Any) -> Any:
    """`value` without what a replay does not reproduce (times, run ids)."""
    if isinstance(value, dict):
        return {k: without_clock(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [without_clock(v) for v in value]
    return value


def assert_the_paused_worker_was_fenced(seen: dict[str, Any]) -> None:
    """After a worker paused in the second model request past its lease: that
    request was sent twice (the paused one and the takeover's), every other
    once; each effect once; the output the uncrashed run's; the paused
    worker's late record was refused and the finished session untouched."""
    assert seen["turns"] == {0: 1, 1: 2, 2: 1}
    assert seen["effects"] == ["/lookup", "/refund"]
    assert sorted(seen["calls"].values()) == [1, 1]
    crashed, clean = seen["result"], seen["clean"]
    assert crashed.startswith("Done: refunded 30 as ")
    assert crashed.rsplit(" ", 1)[0] == clean.rsplit(" ", 1)[0]
    assert seen["unchanged"], "the paused worker changed the finished session"
    assert "lease lost" in seen["zombie"] or "not committed" in seen["zombie"]
    assert seen["events"].count("lease_recovered") == 1
