"""The README's agent runs as written: on a real worker, with a real approval
signal and a fake payment API, so the docs cannot drift from the code."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from resumable.client import Client
from resumable.inbox import Inbox
from tests.conftest import ROOT, ManagedProcess, wait_until
from tests.fake_api import FakeAPI


def _readme_agent_source() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## A small agent", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_readme_agent_runs_to_completion(
    client: Client, tmp_path: Path, start_process: Callable[..., ManagedProcess]
) -> None:
    (tmp_path / "readme_agent.py").write_text(_readme_agent_source())
    start_process(
        ["worker", "--agents", "readme_agent"], "worker started", PYTHONPATH=str(tmp_path)
    )
    with FakeAPI() as payments:
        session_id = client.start(
            "support", {"amount": 500, "payments_url": f"{payments.url}/charges"}
        )
        wait_until(lambda: client.get(session_id).status == "suspended", what="the approval wait")
        receipt = Inbox(client.settings, client.db, client.broker).signal(
            session_id, "approval", {"approved": True}, "approve-1", "test"
        )
        assert receipt.verdict.value == "accepted"
        wait_until(lambda: client.get(session_id).status == "completed", what="completion")
        assert payments.effect_count() == 1
    result = client.get(session_id).result
    assert result is not None and result["receipt"]
