"""What accepting a blocked session would do, read from its blocked reason and
the recorded calls it supersedes (no database: the rule itself, issue 41)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from resumable.context import idempotency_key, tool_request
from resumable.errors import ConfirmationRequiredError, SessionStateError
from resumable.models.blocked_queries import RecordedCall
from resumable.queue.tool_calls import args_hash
from resumable.services.blocked import _check_confirmation, accept_preview

SID = uuid.UUID("3f1c9b7e-8d2a-4c51-9a0e-6b7f2d9c1e45")
RECORDED_KEY = "rsm_recorded"


def _request(**kwargs: Any) -> dict[str, Any]:
    return {"args": [], "kwargs": kwargs}


def _diverged(recorded: dict[str, Any], requested: dict[str, Any], **extra: Any) -> dict[str, Any]:
    canonical = tool_request("refund", (), requested["kwargs"])
    return {
        "kind": "tool_call_diverged",
        "step": "pay",
        "step_seq": 2,
        "call_index": 0,
        "message": "step 'pay' call #0 asks for other arguments than recorded",
        "recorded": {
            "tool": "refund",
            "request": recorded,
            "status": "completed",
            "idempotency_key": RECORDED_KEY,
        },
        "requested": {"tool": "refund", "args_hash": args_hash(canonical), "request": requested},
        "from": "running",
        **extra,
    }


def _call(index: int, tool: str, key: str, request: dict[str, Any]) -> RecordedCall:
    return RecordedCall(
        idempotency_key=key,
        step_seq=2,
        step="pay",
        call_index=index,
        tool=tool,
        status="completed",
        request=request,
        response={"refund_id": f"re_{index}"},
        error=None,
        compensation="undo_refund",
    )


def test_a_changed_argument_is_named_and_the_new_key_is_the_workers() -> None:
    before = _request(amount=40, currency="USD")
    after = _request(amount=40, currency="EUR")
    preview = accept_preview(
        SID,
        _diverged(before, after),
        [_call(0, "refund", RECORDED_KEY, before), _call(1, "notify", "rsm_notify", {})],
    )
    [new] = preview.new_calls
    expected = idempotency_key(
        SID, 2, "pay", 0, "refund", tool_request("refund", (), after["kwargs"])
    )
    assert new.idempotency_key == expected != RECORDED_KEY
    assert (new.tool, new.call_index, new.replaces, new.request) == (
        "refund",
        0,
        RECORDED_KEY,
        after,
    )
    assert [(c.path, c.change, c.recorded, c.requested) for c in new.changes] == [
        ("currency", "changed", "USD", "EUR")
    ]
    assert "argument `currency` changed from `USD` to `EUR` in call `refund` #0" in preview.summary
    assert any(expected in line and "runs again" in line for line in preview.summary)
    assert [(e.tool, e.call_index, e.result) for e in preview.superseded] == [
        ("refund", 0, '{"refund_id":"re_0"}'),
        ("notify", 1, '{"refund_id":"re_1"}'),
    ]
    assert any("`refund` #0" in line and "stays in effect" in line for line in preview.summary)
    assert preview.confirmation_required
    assert preview.confirm == [RECORDED_KEY, "rsm_notify"]


def test_nested_positional_added_and_removed_arguments_are_paths() -> None:
    before = {"args": ["https://x", {"nights": 2, "guest": {"name": "Ann"}}], "kwargs": {"a": 1}}
    after = {
        "args": ["https://x", {"nights": 3, "guest": {"name": "Ann", "vip": True}}],
        "kwargs": {},
    }
    blocked = _diverged(before, after)
    [new] = accept_preview(SID, blocked, []).new_calls
    assert [(c.path, c.change) for c in new.changes] == [
        ("args[1].nights", "changed"),
        ("args[1].guest.vip", "added"),
        ("a", "removed"),
    ]


def test_a_redacted_argument_means_the_new_key_is_not_known_in_advance() -> None:
    before = _request(amount=40, api_key="[REDACTED]")
    after = _request(amount=50, api_key="[REDACTED]")
    blocked = _diverged(before, after)
    # The hash is of the unredacted arguments, which the block did not store.
    blocked["requested"]["args_hash"] = args_hash(
        tool_request("refund", (), {"amount": 50, "api_key": "s3cret"})
    )
    preview = accept_preview(SID, blocked, [_call(0, "refund", RECORDED_KEY, before)])
    assert preview.new_calls[0].idempotency_key is None
    assert any("under a new key" in line for line in preview.summary)


def test_fewer_calls_run_nothing_again_and_need_no_confirmation() -> None:
    blocked = {
        "kind": "tool_calls_missing",
        "step": "pay",
        "step_seq": 2,
        "call_index": 1,
        "recorded": {"tool": "notify", "idempotency_key": "rsm_notify"},
        "requested": None,
    }
    preview = accept_preview(SID, blocked, [_call(1, "notify", "rsm_notify", {})])
    assert preview.new_calls == [] and not preview.confirmation_required
    assert preview.confirm == ["rsm_notify"]
    assert any("nothing replaces it" in line for line in preview.summary)
    _check_confirmation(preview, None)  # no confirmation needed
    _check_confirmation(preview, frozenset({"rsm_notify"}))
    with pytest.raises(ConfirmationRequiredError):
        _check_confirmation(preview, frozenset())  # one given is checked


def test_a_confirmation_must_name_exactly_the_superseded_calls() -> None:
    before, after = _request(currency="USD"), _request(currency="EUR")
    preview = accept_preview(
        SID, _diverged(before, after), [_call(0, "refund", RECORDED_KEY, before)]
    )
    _check_confirmation(preview, frozenset({RECORDED_KEY}))
    for wrong in (None, frozenset(), frozenset({"rsm_other"}), frozenset({RECORDED_KEY, "rsm_x"})):
        with pytest.raises(ConfirmationRequiredError) as refused:
            _check_confirmation(preview, wrong)
        assert isinstance(refused.value, SessionStateError)  # a 409, an exit status 1
        assert refused.value.code == "confirmation_required"
        assert refused.value.preview is preview
        assert (
            "`refund` #0" in refused.value.message
            and "nothing was changed" in refused.value.message
        )
