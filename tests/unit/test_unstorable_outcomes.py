"""A step outcome that cannot be stored is the step's own permanent error,
found in a unit test with resumable.testing (tests/integration/test_bad_input.py
runs the cases whose check is the worker's own on a real worker: a tool's
result, the state, a step's result, a callback token, a child)."""

from __future__ import annotations

import pytest

from resumable.errors import ResumableError
from resumable.testing import run_step
from tests.agents import hostile

CASES = [
    ("huge_tool_result", "not_serializable", "an integer of more than 4300 digits"),
    ("huge_result", "not_serializable", "an integer of more than 4300 digits"),
    ("deep_state", "not_serializable", "nested deeper than 100 levels"),
    ("nul_signal", "invalid_wait", "a Signal topic 'a\\x00b' contains NUL"),
    ("surrogate_signal", "invalid_wait", "a lone surrogate"),
    ("int_signal", "invalid_wait", "a Signal topic must be a non-empty string, got 5"),
    ("nul_poll_args", "not_serializable", "wait.poll.args.a (contains NUL"),
    ("nul_lock", "invalid_wait", "a Lock name 'L\\x00' contains NUL"),
    ("bad_child", "invalid_wait", "takes session ids (from ctx.spawn), got 'not-a-uuid'"),
    ("nan_sleep", "invalid_wait", "cannot be NaN"),
    ("huge_sleep", "invalid_wait", "must be at most"),
    ("inf_timeout", "invalid_wait", "must be at most"),
    ("nul_callback", "invalid_wait", "a callback topic 'a\\x00' contains NUL"),
    ("nul_tool_name", "agent_definition_error", "tool name 'pay\\x00' contains NUL"),
    ("nul_child", "agent_definition_error", "child agent name 'kid\\x00' contains NUL"),
    ("long_child", "agent_definition_error", "is 201 characters; at most 200"),
]


@pytest.mark.parametrize(("how", "code", "message"), CASES)
def test_an_outcome_that_cannot_be_stored_fails_the_step_for_good(
    how: str, code: str, message: str
) -> None:
    calls: list[str] = []

    def huge(counter: str, idempotency_key: str) -> dict[str, int]:
        calls.append("huge")
        return {"n": 10**5000}  # more digits than json writes

    def bump(counter: str) -> int:
        calls.append("bump")
        return len(calls)

    tools = {"huge": huge, "bump": bump}
    with pytest.raises(ResumableError) as caught:
        run_step(hostile, "misbehave", input={"how": how, "counter": "unused"}, tools=tools)
    assert caught.value.code == code
    assert message in caught.value.message
    # Permanent whatever the policy: a worker fails the session once, no retry.
    assert not hostile.policy("misbehave").should_retry(caught.value, 1)
    # A side effect before the mistake ran once; a refused tool name ran nothing.
    expected = {"huge_tool_result": ["huge"], "nul_child": ["bump"], "long_child": ["bump"]}
    assert calls == expected.get(how, [])
