"""Async steps, checks and compensations are recognised when they are
registered, and mistakes are refused there rather than at run time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from resumable import Agent, Complete, StepContext
from resumable.errors import AgentDefinitionError
from resumable.queue.event_loop import EventLoopThread, resolve


def test_coroutine_functions_are_recognised_as_async_steps() -> None:
    agent = Agent("mixed")

    @agent.step
    async def fetch(ctx: StepContext) -> str:
        return "decide"

    @agent.step
    def decide(ctx: StepContext) -> Complete:
        return Complete()

    class Callable:
        async def __call__(self, ctx: StepContext) -> Complete:
            return Complete()

    agent.step(Callable(), name="callable")
    assert agent.is_async_step("fetch")
    assert not agent.is_async_step("decide")
    assert agent.is_async_step("callable")
    assert agent.has_async_steps


def test_an_async_generator_is_refused_as_a_step_check_or_compensation() -> None:
    agent = Agent("generators")

    async def stream(ctx: Any) -> AsyncIterator[str]:
        yield "x"

    with pytest.raises(AgentDefinitionError, match="async generator"):
        agent.step(stream)
    with pytest.raises(AgentDefinitionError, match="async generator"):
        agent.check(stream)
    with pytest.raises(AgentDefinitionError, match="async generator"):
        agent.compensation(stream)


def test_resolve_awaits_on_the_worker_loop_or_on_its_own() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert resolve(7, None) == 7
    assert resolve(answer(), None) == 42
    loop = EventLoopThread(db_threads=2, step_threads=2)
    try:
        assert resolve(answer(), loop) == 42
        assert loop.started
    finally:
        loop.stop()
