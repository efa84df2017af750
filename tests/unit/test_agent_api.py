"""The agent definition API and the pure helpers, without services."""

from __future__ import annotations

import uuid

import pytest

from resumable import Agent, AgentRegistry, Complete, StepContext
from resumable.errors import (
    AgentDefinitionError,
    NotSerializableError,
    UnknownAgentError,
    UnknownStepError,
)
from resumable.queue.tool_calls import idempotency_key
from resumable.serialization import canonical, dumps
from resumable.settings import Settings


def test_first_step_starts_unless_named() -> None:
    agent = Agent("a")

    @agent.step
    def first(ctx: StepContext) -> str:
        return "second"

    @agent.step(name="second")
    def another_name(ctx: StepContext) -> Complete:
        return Complete(1)

    assert agent.start_step == "first"
    assert agent.step_names == ["first", "second"]
    assert Agent("b", start="x").name == "b"
    with pytest.raises(UnknownStepError, match="no step 'third'"):
        agent.get_step("third")


def test_definition_errors_are_clear() -> None:
    agent = Agent("a")

    @agent.step
    def first(ctx: StepContext) -> str:
        return "first"

    with pytest.raises(AgentDefinitionError, match="already has a step named 'first'"):
        agent.step(name="first")(first)
    with pytest.raises(AgentDefinitionError, match="has no steps"):
        AgentRegistry([Agent("empty")])
    wrong_start = Agent("w", start="nope")
    wrong_start.step(first)
    with pytest.raises(AgentDefinitionError, match="unknown step 'nope'"):
        AgentRegistry([wrong_start])
    with pytest.raises(AgentDefinitionError, match="two different agents"):
        other = Agent("a")
        other.step(first)
        AgentRegistry([agent, other])
    with pytest.raises(AgentDefinitionError, match="cannot import"):
        AgentRegistry.from_modules(["no.such.module"])
    with pytest.raises(UnknownAgentError, match="known: a"):
        AgentRegistry([agent]).get("b")


def test_registry_collects_agents_from_modules() -> None:
    registry = AgentRegistry.from_modules(["tests.agents"])
    assert {"bad", "counter", "five", "approval", "poller"} <= {a.name for a in registry}
    only = AgentRegistry.from_modules(["tests.agents:five"])
    assert [a.name for a in only] == ["five"]


def test_idempotency_key_is_deterministic_and_sensitive_to_each_part() -> None:
    sid = uuid.UUID(int=1)
    request = canonical({"args": [], "kwargs": {"b": 2, "a": 1}})
    assert request == canonical({"kwargs": {"a": 1, "b": 2}, "args": []})
    base = idempotency_key(sid, 3, "charge", 0, "pay", request)
    assert base == idempotency_key(sid, 3, "charge", 0, "pay", request)
    variants = {
        idempotency_key(uuid.UUID(int=2), 3, "charge", 0, "pay", request),
        idempotency_key(sid, 4, "charge", 0, "pay", request),
        idempotency_key(sid, 3, "refund", 0, "pay", request),
        idempotency_key(sid, 3, "charge", 1, "pay", request),
        idempotency_key(sid, 3, "charge", 0, "pay2", request),
        idempotency_key(sid, 3, "charge", 0, "pay", canonical({"args": [], "kwargs": {}})),
    }
    assert base not in variants and len(variants) == 6


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ({"a": {"b": [1, {2, 3}]}}, "state.a.b[1] (set)"),
        ({"x": float("inf")}, "state.x (non-finite float inf)"),
        ({"m": {3: "x"}}, "state.m (key 3 is not a string)"),
    ],
)
def test_unserializable_values_are_named(value: object, where: str) -> None:
    with pytest.raises(NotSerializableError) as caught:
        dumps(value, "state")
    assert str(caught.value) == f"state is not JSON-serializable at {where}"


def test_settings_read_urls_and_agent_lists_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://u@h/db")
    monkeypatch.setenv("RESUMABLE_AGENTS", "a.b, c.d:agent")
    monkeypatch.setenv("RESUMABLE_LEASE_SECONDS", "7.5")
    settings = Settings()
    assert settings.database_url == "postgresql://u@h/db"
    assert settings.agents == ["a.b", "c.d:agent"]
    assert settings.lease_seconds == 7.5
    monkeypatch.setenv("RESUMABLE_LEASE_SECONDS", "-1")
    with pytest.raises(ValueError, match="greater than 0"):
        Settings()
