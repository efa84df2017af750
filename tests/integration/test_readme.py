"""Every Python block of the README runs as written, so the docs cannot drift
from the code: the agent on a real worker with a real approval signal and a
fake payment API; the client blocks in their own interpreter against the test
servers (``DATABASE_URL`` / ``REDIS_URL``, as a reader's environment would
name them); an excerpt marked ``<!-- excerpt: PATH -->`` is checked to be
that file's code, line for line."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from resumable.client import Client
from resumable.models.database import Database
from resumable.settings import Settings
from tests.conftest import ROOT, ManagedProcess, wait_until
from tests.fake_api import FakeAPI

_BLOCK = re.compile(
    r"(?:<!-- excerpt: (?P<excerpt>\S+) -->\n+)?```python\n(?P<source>.*?)```", re.S
)


@dataclass(frozen=True)
class Block:
    source: str
    excerpt_of: str | None  # a file the block is an excerpt of, not runnable alone

    @property
    def defines_the_agent(self) -> bool:
        return 'Agent("support")' in self.source

    @property
    def extends_the_agent(self) -> bool:
        """A block that adds a step to the agent block's `support` (run after it)."""
        return "@support.step" in self.source and not self.defines_the_agent


def _blocks() -> list[Block]:
    readme = (ROOT / "README.md").read_text()
    return [Block(m["source"], m["excerpt"]) for m in _BLOCK.finditer(readme)]


def _runnable() -> list[Block]:
    return [
        b
        for b in _blocks()
        if b.excerpt_of is None and not b.defines_the_agent and not b.extends_the_agent
    ]


def _run(block: Block, settings: Settings) -> subprocess.CompletedProcess[str]:
    env = {
        "DATABASE_URL": settings.database_url or "",
        "REDIS_URL": settings.redis_url or "",
        "PATH": "/usr/bin:/bin",
        "HOME": "/tmp",
    }
    return subprocess.run(
        [sys.executable, "-c", block.source],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
        timeout=120,
    )


def test_every_python_block_is_run_or_checked() -> None:
    blocks = _blocks()
    assert sum(b.defines_the_agent for b in blocks) == 1
    assert [b.excerpt_of for b in blocks if b.excerpt_of] == ["examples/fastapi_app.py"]
    assert sum(b.extends_the_agent for b in blocks) == 1  # the async step
    # The sync client, dead letters, the async client and agent versions.
    assert len(_runnable()) == 4


def test_the_readme_agent_runs_to_completion(
    client: Client, tmp_path: Path, start_process: Callable[..., ManagedProcess]
) -> None:
    [agent] = [b for b in _blocks() if b.defines_the_agent]
    (tmp_path / "readme_agent.py").write_text(agent.source)
    start_process(
        ["worker", "--agents", "readme_agent"], "worker started", PYTHONPATH=str(tmp_path)
    )
    with FakeAPI() as payments:
        session_id = client.start(
            "support", {"amount": 500, "payments_url": f"{payments.url}/charges"}
        )
        wait_until(lambda: client.get(session_id).status == "suspended", what="the approval wait")
        delivery = client.signal(session_id, "approval", {"approved": True}, actor="test")
        assert delivery.status == "accepted"
        wait_until(lambda: client.get(session_id).status == "completed", what="completion")
        assert payments.effect_count() == 1
    result = client.get(session_id).result
    assert result is not None and result["receipt"]


def test_the_readme_async_step_extends_the_agent_as_an_async_step(settings: Settings) -> None:
    """The async-step block, run after the agent block's definitions, adds an
    ``async def`` step the worker will await on its event loop."""
    [agent] = [b for b in _blocks() if b.defines_the_agent]
    [extension] = [b for b in _blocks() if b.extends_the_agent]
    check = "\nassert support.is_async_step('draft') and support.has_async_steps\n"
    ran = _run(Block(agent.source + "\n" + extension.source + check, None), settings)
    assert ran.returncode == 0, ran.stderr


def failed_with_a_dead_letter(client: Client, db: Database, error_type: str) -> int:
    """A `support` session that failed for good, with its open dead letter (as
    a worker would leave it; the README's retry block needs one to act on)."""
    # Written straight in its failed state, never enqueued: a worker of the
    # test (which does not load `support`) must not claim it first.
    session_id = uuid.uuid4()
    with db.connection() as conn:
        conn.execute(
            """INSERT INTO sessions (id, agent, status, cursor, state, input)
               VALUES (%s, 'support', 'failed', 'charge_customer', '{}', '{"amount": 1}')""",
            (session_id,),
        )
        row = conn.execute(
            """INSERT INTO dead_letters (session_id, agent, step, error_code, error_type,
                   error_message, attempts, compensation, status)
               VALUES (%s, 'support', 'charge_customer', 'transient_error', %s,
                   'payments API down', 5, 'none', 'open')
               RETURNING id""",
            (session_id, error_type),
        ).fetchone()
    assert row is not None
    return int(str(row["id"]))


def test_the_readme_client_blocks_run_as_written(
    client: Client, db: Database, settings: Settings
) -> None:
    sync_block, dead_letter_block, async_block, versions_block = _runnable()

    ran = _run(sync_block, settings)
    assert ran.returncode == 0, ran.stderr
    [started] = client.list_sessions(agent="support")
    assert (started.status, started.input["amount"]) == ("pending", 500)
    assert str(started.session_id) in ran.stdout
    events = [e.type for e in client.events(started.session_id)]
    assert events == ["session_created", "signal_received"], events
    again = _run(sync_block, settings)  # the idempotency keys: nothing new
    assert again.returncode == 0, again.stderr
    assert client.list_sessions(agent="support") == [started]
    assert [e.type for e in client.events(started.session_id)] == events

    transient = failed_with_a_dead_letter(client, db, "TransientError")
    permanent = failed_with_a_dead_letter(client, db, "PermanentError")
    ran = _run(dead_letter_block, settings)
    assert ran.returncode == 0, ran.stderr
    assert "payments API down" in ran.stdout
    retried = client.dead_letter(transient)
    assert (retried.status, retried.resolved_by) == ("retried", "ops:alice")
    assert client.get(retried.session_id).status == "pending"
    assert client.dead_letter(permanent).status == "open"

    ran = _run(async_block, settings)
    assert ran.returncode == 0, ran.stderr
    assert "pending ['session_created', 'signal_received']" in ran.stdout
    newest = client.list_sessions(agent="support", limit=1)
    assert newest[0].input["amount"] == 700

    ran = _run(versions_block, settings)  # definitions and the assertion it ends with
    assert ran.returncode == 0, ran.stderr


def test_the_fastapi_excerpt_is_the_example_code() -> None:
    [excerpt] = [b for b in _blocks() if b.excerpt_of]
    assert excerpt.excerpt_of is not None
    source = [line.strip() for line in (ROOT / excerpt.excerpt_of).read_text().splitlines()]
    position = 0
    for line in (line.strip() for line in excerpt.source.splitlines()):
        if not line:
            continue
        assert line in source[position:], f"not in {excerpt.excerpt_of} (in order): {line}"
        position = source.index(line, position) + 1
