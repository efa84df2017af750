"""Framework adapters: keep an agent written with PydanticAI or the OpenAI
Agents SDK, and run it durably on resumable.

Each adapter is imported on its own (``resumable.integrations.pydantic_ai``,
``resumable.integrations.openai_agents``) and needs its extra
(``resumable[pydantic-ai]``, ``resumable[openai-agents]``); this package
imports neither framework, so ``import resumable`` never pulls them in.

What they share lives here: the idempotency key a tool reads while it runs
(``idempotency_key()``), how a recorded call is made from an async or a sync
step (``_recording``), and the steps that turn a framework's run into a
session that suspends for approvals (``_session``).
"""

from resumable.integrations._recording import idempotency_key

__all__ = ["idempotency_key"]
