"""OpenAI Agents SDK agents on resumable (resumable.integrations.openai_agents): in
memory with resumable.testing, and on real workers SIGKILLed mid-run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from resumable.client import Client
from resumable.testing import TestSession
from tests.conftest import LocalDeployment
from tests.framework_checks import (
    PENDING_REFUND,
    assert_crashes_repeated_nothing,
    assert_the_paused_worker_was_fenced,
    without_clock,
)
from tests.framework_crash import crash_twice, pause_past_lease
from tests.framework_fake_openai import FakeOpenAI

AGENTS = "tests.framework_openai_agents"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as api:
        monkeypatch.setenv("FAKE_OPENAI_URL", api.url)
        yield api


@pytest.mark.parametrize("name", ["openai_refunds", "openai_refunds_sync"])
def test_an_approved_refund_runs_one_turn_per_step(fake: FakeOpenAI, name: str) -> None:
    from tests import framework_openai_agents as agents

    session = TestSession(getattr(agents, name), {"prompt": "refund o1", "deps": {"api": fake.url}})
    wait = session.run_until_wait()
    assert wait.then == "decide"
    assert session.state["pending"] == PENDING_REFUND
    session.signal("approval", {"approved": True})
    result = session.run_until_done()
    assert result.startswith("Done: refunded 30 as ")
    assert [c.tool for c in session.calls] == [
        "model_request",
        "tool:lookup",
        "model_request",
        "tool:refund",
        "model_request",
    ]
    assert fake.model_requests == 3
    assert fake.effect_count() == 2
    roles = [m.get("role") or m.get("type") for m in session.state["input"]]
    assert roles == ["user", "function_call", "function_call_output"] * 1 + [
        "function_call",
        "function_call_output",
        "assistant",
    ]


def test_a_rejection_reason_reaches_the_model_and_nothing_is_refunded(fake: FakeOpenAI) -> None:
    from tests.framework_openai_agents import openai_refunds

    session = TestSession(openai_refunds, {"prompt": "refund o1", "deps": {"api": fake.url}})
    session.run_until_wait()
    session.signal(
        "approval", {"decisions": {"call_2": {"approved": False, "reason": "no receipt"}}}
    )
    assert session.run_until_done() == "Done: no receipt"
    assert [path for path, _ in fake.order] == ["/lookup"]


def test_no_decision_in_time_rejects_the_call(fake: FakeOpenAI) -> None:
    from resumable.integrations.openai_agents import durable
    from tests.framework_openai_agents import FakeProvider, _context, support

    agent = durable(
        support,
        name="openai_timeout",
        context=_context,
        model_provider=FakeProvider(),
        approval_timeout=3600,
    )
    session = TestSession(agent, {"prompt": "refund o1", "deps": {"api": fake.url}})
    assert session.run_until_done() == "Done: No decision arrived in time."
    assert [path for path, _ in fake.order] == ["/lookup"]


def test_a_replayed_turn_sends_nothing_again(fake: FakeOpenAI) -> None:
    from resumable.testing import run_step
    from tests.framework_openai_agents import openai_refunds

    first = run_step(
        openai_refunds, "turn", input={"prompt": "refund o1", "deps": {"api": fake.url}}
    )
    assert (fake.model_requests, fake.total_calls()) == (1, 1)
    again = first.rerun()
    assert [c.replayed for c in again.calls] == [True, True]
    assert (fake.model_requests, fake.total_calls()) == (1, 1)
    assert without_clock(again.state) == without_clock(first.state)


def test_sigkill_in_a_model_request_and_in_a_tool_call_repeats_nothing(
    client: Client, reconciler: None, tmp_path: Path, deployment: LocalDeployment
) -> None:
    assert_crashes_repeated_nothing(
        crash_twice(client, deployment, tmp_path, AGENTS, "openai_refunds")
    )


def test_a_worker_paused_past_its_lease_in_a_model_request_is_fenced(
    client: Client, reconciler: None, deployment: LocalDeployment
) -> None:
    assert_the_paused_worker_was_fenced(
        pause_past_lease(client, deployment, AGENTS, "openai_refunds_sync")
    )
