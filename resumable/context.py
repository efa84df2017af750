"""What a step sees: the session's state, its input, and idempotent tool calls."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from resumable.agent import Complete, Next
from resumable.tools import ToolCalls

T = TypeVar("T")


class StepContext:
    """Handed to each step.

    ``state`` is the agent's working memory (a JSON-serializable dict; by
    convention with parts such as ``task``, ``memory``, ``plan``, ``progress``,
    ``context``, ``tool_results``, ``decisions``, ``conversation``). Mutate it
    in place or replace it; it is committed when the step returns.
    """

    def __init__(
        self,
        *,
        session_id: uuid.UUID,
        agent: str,
        step: str,
        seq: int,
        input: Any,
        state: dict[str, Any],
        tools: ToolCalls,
        logger: logging.Logger,
    ) -> None:
        self.session_id = session_id
        self.agent = agent
        self.step = step
        self.seq = seq
        self.input = input
        self.state = state
        self.log = logger
        self._tools = tools

    def tool(self, name: str, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run a side effect once per logical call and return its result.

        ``fn`` is called with ``args``/``kwargs`` (which must be JSON-serializable)
        plus ``idempotency_key=`` when it accepts that keyword: pass it on to the
        external API. Its return value must be JSON-serializable; on a replay of
        this step the recorded value is returned and ``fn`` is not called.
        """
        result: T = self._tools.call(name, fn, args, kwargs)
        return result

    @staticmethod
    def next(step: str) -> Next:
        """Go on with `step` after this one commits."""
        return Next(step)

    @staticmethod
    def complete(result: Any = None) -> Complete:
        """Finish the session with `result`."""
        return Complete(result)
