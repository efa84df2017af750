"""The agent definition API and the pure helpers, without services."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from resumable import Agent, AgentRegistry, Complete, RetryPolicy, StepContext
from resumable._internal.serialization import canonical, dumps
from resumable.checkpoints import EventSourced, Incremental, Snapshot
from resumable.context import idempotency_key
from resumable.errors import (
    AgentDefinitionError,
    NotSerializableError,
    UnknownAgentError,
    UnknownStepError,
)
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


@pytest.mark.parametrize(
    ("source", "said"),
    [
        (
            "x = 1\nraise RuntimeError('no config')\n",
            "raised RuntimeError while importing at {path}:2: no config",
        ),
        ("def f(:\n", "raised SyntaxError while importing at {path}:1: invalid syntax"),
    ],
)
def test_an_agent_module_that_fails_as_it_runs_is_a_definition_error_saying_where(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, source: str, said: str
) -> None:
    """It was "unexpected RuntimeError (a bug)", read as resumable's own bug,
    with nothing pointing at the user's file."""
    path = tmp_path / "failing_agents_module.py"
    path.write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(AgentDefinitionError) as caught:
        AgentRegistry.from_modules(["failing_agents_module"])
    assert caught.value.message == "agent module 'failing_agents_module' " + said.format(path=path)


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


def _step(ctx: object) -> None:
    return None


@pytest.mark.parametrize(
    ("define", "message"),
    [
        # Each was taken here and failed later: a worker that would not start
        # ("unexpected DataError ... a bug"), an agent Client.start refused,
        # or sessions that stayed pending without a word (a NaN time limit).
        (lambda: Agent("nul\x00agent"), "agent name 'nul\\x00agent' contains NUL"),
        (lambda: Agent("surr\ud800"), "lone surrogate"),
        (lambda: Agent("x" * 300), "at most 200"),
        (lambda: Agent("v", version=10**30), "version must be a positive integer, at most"),
        (lambda: Agent("a").step(_step, name="s\x00"), "step name 's\\x00' contains NUL"),
        (lambda: Agent("a").step(_step, name=""), "a step name must be a non-empty string"),
        (
            lambda: Agent("a").step(_step, name=5),  # type: ignore[call-overload]
            "a step name must be a non-empty string",
        ),
        (lambda: Agent("a").step("hello"), "a step is a function"),  # type: ignore[call-overload]
        (lambda: Agent("a").step(_step, aliases=["old\x00"]), "step alias"),
        (lambda: Agent("a").check(_step, name="c\ud800"), "check name"),
        (lambda: Agent("a").compensation(_step, name=""), "compensation name"),
        (lambda: RetryPolicy(time_limit=float("nan")), "time_limit must be a finite number"),
        (lambda: RetryPolicy(time_limit=float("inf")), "time_limit must be a finite number"),
        (lambda: RetryPolicy(time_limit="3"), "time_limit must be a finite"),  # type: ignore[arg-type]
        (lambda: RetryPolicy(max_delay=float("inf")), "max_delay must be a finite number"),
        (lambda: RetryPolicy(max_attempts=2.5), "max_attempts must be an int"),  # type: ignore[arg-type]
        # Taken here, then failing on the worker: a timestamp overflow left the
        # session running and its tool calls repeating; a comparison with 5
        # raised TypeError in the failure handler; "pay" named three aliases.
        (lambda: RetryPolicy(time_limit=1e300), "at most 315,360,000"),
        (lambda: RetryPolicy(min_delay=1e300, max_delay=1e300), "at most 315,360,000"),
        (lambda: RetryPolicy(transient=5), "transient must be a tuple of exception classes"),  # type: ignore[arg-type]
        (lambda: RetryPolicy(permanent=(KeyError, "x")), "permanent must be a tuple"),  # type: ignore[arg-type]
        (lambda: Agent("a").step(_step, retry=5), "a step's retry must be a RetryPolicy"),  # type: ignore[call-overload]
        (lambda: Agent("a", retry=5), "retry must be a RetryPolicy"),  # type: ignore[arg-type]
        (lambda: Agent("a", checkpoints=5), "checkpoints must be Snapshot()"),  # type: ignore[arg-type]
        (lambda: EventSourced(5), "EventSourced needs a reducer"),  # type: ignore[arg-type]
        (lambda: Incremental("5"), "snapshot_every must be an integer"),  # type: ignore[arg-type]
        (lambda: Snapshot(5), "snapshot_every of Snapshot is always 1"),
        (lambda: Agent("a").step(_step, aliases="pay"), "write aliases=['pay']"),
        (lambda: Agent("a", version=2, patches=["x"]), "patches maps each patch name"),  # type: ignore[arg-type]
        (lambda: Agent("a", version=2, patches={"a\x00": 1}), "patch name 'a\\x00' contains NUL"),
    ],
)
def test_a_definition_a_worker_could_not_store_is_refused_when_it_is_made(
    define: Any, message: str
) -> None:
    with pytest.raises(AgentDefinitionError) as raised:
        define()
    assert message in str(raised.value), raised.value


def test_a_single_exception_class_is_taken_as_the_tuple_of_one() -> None:
    assert RetryPolicy(transient=KeyError).transient == (KeyError,)  # type: ignore[arg-type]
    assert RetryPolicy(permanent=[KeyError]).permanent == (KeyError,)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("retry_after", "at_least", "at_most"),
    [(float("inf"), 315_360_000, 315_360_000), (1e300, 315_360_000, 315_360_000),
     (10**5000, 315_360_000, 315_360_000), (float("nan"), 0.0, 2.0), (30, 30, 30)],
    ids=["inf", "1e300", "5000 digits", "nan", "30"],
)  # fmt: skip
def test_a_failures_retry_after_is_at_most_ten_years_and_nan_is_ignored(
    retry_after: float, at_least: float, at_most: float
) -> None:
    from resumable.errors import TransientError

    policy = RetryPolicy(min_delay=1, max_delay=2)
    delay = policy.delay(1, TransientError("slow down", retry_after=retry_after))
    assert at_least <= delay <= at_most
