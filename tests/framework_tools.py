"""What the framework test agents share: their tools' effects go to the
test's fake server with the recorded call's idempotency key, and a tool can
be held (while a gate file exists) after its effect, so a test can SIGKILL
the worker between the effect and its record."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import httpx

from resumable.integrations import idempotency_key


def fake_url() -> str:
    """The fake OpenAI-compatible server of the test (set in the worker's environment)."""
    return os.environ["FAKE_OPENAI_URL"]


async def effect(api: str, path: str, body: dict[str, Any], gate: str | None) -> dict[str, Any]:
    """POST an effect with the call's key; then hold while ``hold-tool`` exists."""
    key = idempotency_key()
    assert key is not None, "a recorded tool runs with an idempotency key"
    async with httpx.AsyncClient(timeout=10) as http:
        answer = await http.post(f"{api}{path}", json=body, headers={"Idempotency-Key": key})
    answer.raise_for_status()
    if gate:
        folder = Path(gate)
        (folder / f"entered-tool-{path.strip('/')}").touch()
        deadline = time.monotonic() + 60
        while (folder / "hold-tool").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    result: dict[str, Any] = answer.json()
    return result
