"""Every Python block of the README and of the docs' guides runs as written, so
the docs cannot drift from the code:

- the quick-start agent (README and docs/quickstart.md) on a real worker,
  started and approved by the quick start's client block and, again, by its
  shell commands;
- the `support` agent of docs/guides/agents.md on a real worker with a real
  approval signal and a fake payment API, and the async step that
  docs/guides/async-steps.md adds to it;
- the client blocks of docs/guides/python-client.md in their own interpreter
  against the test servers (``DATABASE_URL`` / ``REDIS_URL``, as a reader's
  environment would name them);
- every other block (agent definitions, the versions example, the framework
  agents of docs/guides/frameworks.md) in its own interpreter, its agents
  registered as a worker would;
- an excerpt marked ``<!-- excerpt: PATH -->`` is checked to be that file's
  code, line for line."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from resumable.client import Client
from resumable.models.database import Database
from resumable.settings import Settings
from tests.conftest import ROOT, ManagedProcess, broker_env, wait_until
from tests.fake_api import FakeAPI

_BLOCK = re.compile(
    r"(?:<!-- excerpt: (?P<excerpt>\S+) -->\n+)?```python\n(?P<source>.*?)```", re.S
)
_AGENT = re.compile(r'^(\w+) = Agent\(\s*"([\w-]+)"', re.M)

# Pages whose Python blocks another test runs, as their page teaches them
# (docs/testing.md: the testing kit's tests, in memory, run by its own test).
RUN_ELSEWHERE = {"docs/testing.md": "tests/unit/test_testing_kit.py"}
# The pages whose Python blocks are run or checked here.
PAGES = tuple(
    page
    for page in (
        "README.md",
        *(str(p.relative_to(ROOT)) for p in sorted((ROOT / "docs").rglob("*.md"))),
    )
    if page not in RUN_ELSEWHERE
)


@dataclass(frozen=True)
class Block:
    page: str
    source: str
    excerpt_of: str | None  # a file the block is an excerpt of, not runnable alone

    @property
    def agent(self) -> str | None:
        """The agent a block defines (`support = Agent("support")`), if it does."""
        found = _AGENT.search(self.source)
        return found[2] if found else None

    @property
    def extends(self) -> str | None:
        """The agent variable a block adds steps to without defining it."""
        found = re.search(r"^@(\w+)\.step", self.source, re.M)
        if found and not re.search(rf"^{found[1]} = Agent\(", self.source, re.M):
            return found[1]
        return None

    @property
    def uses_a_client(self) -> bool:
        return "Client" in self.source and self.agent is None

    @property
    def kind(self) -> str:
        if self.excerpt_of:
            return "excerpt"
        if self.extends:
            return f"extends {self.extends}"
        if self.uses_a_client:
            return "client"
        if self.agent:
            return f"agent {self.agent}"
        return "standalone"


def _blocks() -> list[Block]:
    return [
        Block(page, m["source"], m["excerpt"])
        for page in PAGES
        for m in _BLOCK.finditer((ROOT / page).read_text())
    ]


def _of(kind: str, page: str | None = None) -> list[Block]:
    return [b for b in _blocks() if b.kind == kind and page in (None, b.page)]


def _agent(name: str, page: str) -> Block:
    [block] = _of(f"agent {name}", page)
    return block


def _run(block: Block, settings: Settings, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {
        "DATABASE_URL": settings.database_url or "",
        "REDIS_URL": settings.redis_url or "",
        **broker_env(settings),
        "PATH": "/usr/bin:/bin",
        "HOME": "/tmp",
        **env,
    }
    return subprocess.run(
        [sys.executable, "-c", block.source],
        capture_output=True,
        text=True,
        env=environment,
        cwd=ROOT,
        check=False,
        timeout=120,
    )


def test_every_python_block_is_run_or_checked() -> None:
    """The inventory: a new block fails this until a test runs it."""
    found = Counter((b.page, b.kind) for b in _blocks())
    assert found == Counter(
        {
            ("README.md", "agent greeter"): 1,
            ("README.md", "client"): 1,
            ("docs/quickstart.md", "agent greeter"): 1,
            ("docs/quickstart.md", "client"): 1,
            ("docs/guides/agents.md", "agent support"): 1,
            ("docs/guides/agents.md", "agent booking"): 1,
            ("docs/guides/async-steps.md", "extends support"): 1,
            ("docs/guides/python-client.md", "client"): 3,
            ("docs/guides/versions.md", "agent trip"): 1,
            ("docs/guides/embedding.md", "excerpt"): 1,
            ("docs/guides/frameworks.md", "standalone"): 2,
            ("docs/guides/schedules.md", "agent inbox_summary"): 1,
            ("docs/guides/concurrency.md", "agent support"): 1,
            ("docs/guides/concurrency.md", "agent research"): 1,
            ("docs/guides/rate-limits.md", "agent support"): 1,
        }
    )
    for page, test in RUN_ELSEWHERE.items():
        assert page in (ROOT / test).read_text(), f"{test} no longer runs {page}'s blocks"
    # The quick-start page teaches the README's own agent and client.
    for kind in ("agent greeter", "client"):
        assert _of(kind, "docs/quickstart.md")[0].source == _of(kind, "README.md")[0].source


def _quick_start_shell_block() -> str:
    """The README's shell commands that start and approve a greeter session."""
    readme = (ROOT / "README.md").read_text()
    blocks: list[str] = re.findall(r"```bash\n(.*?)```", readme, re.S)
    [block] = [b for b in blocks if "enqueue greeter" in b]
    return block


def test_the_quick_start_runs_to_completion(
    client: Client,
    settings: Settings,
    tmp_path: Path,
    start_process: Callable[..., ManagedProcess],
) -> None:
    """The README's quick start, as a reader runs it: the agent on a worker,
    then the client block, then the shell commands."""
    (tmp_path / "greeter.py").write_text(_agent("greeter", "README.md").source)
    start_process(["worker", "--agents", "greeter"], "worker started", PYTHONPATH=str(tmp_path))

    [client_block] = _of("client", "README.md")
    ran = _run(client_block, settings)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("completed {'sent': True, 'receipt': {'to': 'ada@example.com'")

    # The shell form: its `.venv/bin/` is this interpreter's, the agent module on
    # the path as a reader's working directory would hold it.
    shell = _quick_start_shell_block().replace(".venv/bin/", f"{Path(sys.executable).parent}/")
    ran = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", shell],
        capture_output=True,
        text=True,
        env={
            "DATABASE_URL": settings.database_url or "",
            "REDIS_URL": settings.redis_url or "",
            **broker_env(settings),
            "PYTHONPATH": str(tmp_path),
            "PATH": "/usr/bin:/bin",
            "HOME": "/tmp",
        },
        cwd=ROOT,
        check=False,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    sessions = client.list_sessions(agent="greeter")
    assert len(sessions) == 2
    assert str(sessions[0].session_id) in ran.stdout  # `sessions show` printed it
    session = client.wait(sessions[0].session_id, timeout=60)
    assert session.status == "completed" and session.result is not None
    assert session.result["sent"] is True


def test_the_guides_agent_runs_to_completion(
    client: Client, tmp_path: Path, start_process: Callable[..., ManagedProcess]
) -> None:
    agent = _agent("support", "docs/guides/agents.md")
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


def test_the_async_step_extends_the_agent_as_an_async_step(settings: Settings) -> None:
    """The async-step block, run after the agent block's definitions, adds an
    ``async def`` step the worker will await on its event loop."""
    agent = _agent("support", "docs/guides/agents.md")
    [extension] = _of("extends support")
    check = "\nassert support.is_async_step('draft') and support.has_async_steps\n"
    ran = _run(Block("", agent.source + "\n" + extension.source + check, None), settings)
    assert ran.returncode == 0, ran.stderr


def test_every_agent_definition_loads_as_a_worker_would(settings: Settings) -> None:
    """Blocks that only define agents (and the versions block's assertion) run
    in their own interpreter; their agents then register, as a worker's do."""
    register = (
        "\nfrom resumable import Agent, AgentRegistry\n"
        "AgentRegistry([v for v in list(globals().values()) if isinstance(v, Agent)])\n"
    )
    frameworks = "docs/guides/frameworks.md"
    blocks = [
        *_of("agent booking"),
        *_of("agent trip"),
        *_of("standalone"),
        *_of("agent inbox_summary"),
        *_of("agent support", "docs/guides/concurrency.md"),
        *_of("agent research", "docs/guides/concurrency.md"),
        *_of("agent support", "docs/guides/rate-limits.md"),
    ]
    for block in [b for b in blocks if b.page != frameworks]:
        ran = _run(Block(block.page, block.source + register, None), settings)
        assert ran.returncode == 0, f"{block.page}: {ran.stderr}"


def test_the_framework_guides_agents_load_as_a_worker_would(settings: Settings) -> None:
    """docs/guides/frameworks.md's PydanticAI and OpenAI Agents SDK blocks, one
    after the other in a fresh interpreter (a key in the environment, as a
    reader's worker has one): ``durable`` makes each a resumable agent of
    two steps, and they register as a worker's agents do."""
    register = (
        "\nfrom resumable import Agent, AgentRegistry\n"
        "durables = [v for v in list(globals().values()) if isinstance(v, Agent)]\n"
        "AgentRegistry(durables)\n"
        "print(sorted((a.name, a.start_step, a.has_async_steps) for a in durables))\n"
    )
    pydantic_block, openai_block = _of("standalone", "docs/guides/frameworks.md")
    assert "pydantic_ai" in pydantic_block.source and "from agents" in openai_block.source
    source = pydantic_block.source + "\n" + openai_block.source + register
    ran = _run(Block(pydantic_block.page, source, None), settings, OPENAI_API_KEY="sk-x")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[('researcher', 'turn', True), ('support', 'turn', True)]"


def failed_with_a_dead_letter(client: Client, db: Database, error_type: str) -> int:
    """A `support` session that failed for good, with its open dead letter (as
    a worker would leave it; the guide's retry block needs one to act on)."""
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


def test_the_client_blocks_run_as_written(client: Client, db: Database, settings: Settings) -> None:
    sync_block, dead_letter_block, async_block = _of("client", "docs/guides/python-client.md")

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


def test_the_fastapi_excerpt_is_the_example_code() -> None:
    [excerpt] = _of("excerpt")
    assert excerpt.excerpt_of is not None
    source = [line.strip() for line in (ROOT / excerpt.excerpt_of).read_text().splitlines()]
    position = 0
    for line in (line.strip() for line in excerpt.source.splitlines()):
        if not line:
            continue
        assert line in source[position:], f"not in {excerpt.excerpt_of} (in order): {line}"
        position = source.index(line, position) + 1
