"""RateLimit(...) definitions: what an agent may declare and name on its
calls, and what it is refused (when it is defined, or at the first call)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from resumable import Agent, AgentDefinitionError, Complete, RateLimit, StepContext
from resumable.queue.rate_turns import WaitForRate, rate_wait_in
from resumable.retries import MAX_SECONDS
from resumable.testing import run_step


def test_a_limit_of_requests_tokens_or_both() -> None:
    llm = RateLimit("openai", requests=60, per=60)
    assert llm.interval == 1.0 and llm.seconds_per_token == 0.0
    assert llm.describe() == "60 requests per 60 s"
    both = RateLimit("openai", requests=500, tokens=90_000, cost=lambda r: r["tokens"])
    assert both.describe() == "500 requests and 90,000 tokens per 60 s"
    assert both.seconds_per_token == 60 / 90_000
    assert both.call_cost({"tokens": 12}) == 12.0
    # A cost the result does not report, or reports as nonsense, counts nothing.
    for answer in ({"tokens": "12"}, {"tokens": -3}, {"tokens": float("nan")}, {"tokens": True}):
        assert both.call_cost(answer) == 0.0
    agent = Agent("caller", rate_limits=[llm])
    assert agent.rate_limit("openai") is llm
    assert Agent("free").rate_limits == {}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"name": ""},
        {"name": "x" * 201},
        {"name": "bad\x00name"},
        {"name": "\ud800"},
        {"name": "new\nline"},
        {"name": 7},
        {"requests": None},  # neither requests nor tokens
        {"requests": 0},
        {"requests": -1},
        {"requests": True},
        {"requests": 2.5},
        {"requests": 10**10},
        {"per": 0},
        {"per": -1},
        {"per": float("inf")},
        {"per": float("nan")},
        {"per": 10**6},
        {"per": "60"},
        {"wait_in_place": -1},
        {"wait_in_place": float("nan")},
        {"burst": 0},
        {"burst": 11},  # more than requests
        {"burst": 1.5},
        {"tokens": 1000},  # tokens without a cost function
        {"tokens": 1000, "cost": "tokens"},
        {"tokens": 1000, "cost": len, "estimate": -1},
        {"tokens": 1000, "cost": len, "estimate": 1001},
        {"tokens": 1000, "cost": len, "estimate": float("nan")},
        {"tokens": 1000, "cost": len, "estimate": "7"},
    ],
)
def test_a_wrong_limit_is_refused_when_it_is_defined(kwargs: dict[str, Any]) -> None:
    arguments: dict[str, Any] = {"name": "llm", "requests": 10, **kwargs}
    with pytest.raises(AgentDefinitionError):
        RateLimit(**arguments)


def test_an_agent_declares_each_limit_once_as_rate_limit_objects() -> None:
    llm = RateLimit("llm", requests=1)
    with pytest.raises(AgentDefinitionError, match="twice"):
        Agent("twice", rate_limits=[llm, RateLimit("llm", requests=2)])
    with pytest.raises(AgentDefinitionError, match="RateLimit"):
        Agent("wrong", rate_limits=["llm"])  # type: ignore[list-item]
    with pytest.raises(AgentDefinitionError, match="list of RateLimit"):
        Agent("wrong", rate_limits="llm")  # type: ignore[arg-type]
    assert Agent("one", rate_limits=llm).rate_limits == {"llm": llm}  # type: ignore[arg-type]


agent = Agent("asks", rate_limits=[RateLimit("llm", requests=5)])


@agent.step
def ask(ctx: StepContext) -> Complete:
    answer = ctx.tool("chat", lambda: "hi", rate_limit=ctx.input["limit"])
    return Complete(answer)


def test_a_call_naming_a_limit_the_agent_lacks_is_a_definition_error() -> None:
    result = run_step(agent, "ask", input={"limit": "llm"}, tools={"chat": lambda: "hello"})
    assert result.result == "hello"  # in memory the limit is checked, not enforced
    with pytest.raises(AgentDefinitionError, match="declares no rate limit 'other'"):
        run_step(agent, "ask", input={"limit": "other"}, tools={"chat": lambda: "hello"})


def test_a_spacing_below_a_microsecond_is_refused() -> None:
    RateLimit("fast", requests=1_000_000, per=1)
    with pytest.raises(AgentDefinitionError, match="requests a second"):
        RateLimit("faster", requests=10**9, per=0.5)


def test_a_task_groups_waits_for_turns_are_one_wait_and_a_failure_among_them_is_not() -> None:
    short, long = WaitForRate("llm", 1.0, "far"), WaitForRate("llm", 3.0, "far")
    assert rate_wait_in(short) is short
    assert rate_wait_in(BaseExceptionGroup("g", [short, long])) is long
    nested = BaseExceptionGroup("g", [asyncio.CancelledError(), ExceptionGroup("h", [KeyError()])])
    assert rate_wait_in(nested) is None
    cancelled = BaseExceptionGroup("g", [short, asyncio.CancelledError()])
    assert rate_wait_in(cancelled) is short
    assert rate_wait_in(BaseExceptionGroup("g", [short, ValueError("boom")])) is None
    assert rate_wait_in(ValueError("boom")) is None
    # A wait is kept within what a retry can be scheduled for.
    assert WaitForRate("llm", -5, "x").seconds == 0.001
    assert WaitForRate("llm", 1e300, "x").seconds == MAX_SECONDS
