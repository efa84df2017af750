"""The crash scenario both framework integrations are tested with, on real
worker processes: SIGKILL one during a model request, approve the refund
through a signal, SIGKILL the next during the refund tool (after its effect,
before its record), and let a third finish."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from resumable.client import Client
from tests.conftest import LocalDeployment, wait_until
from tests.framework_fake_openai import FakeOpenAI


def status(client: Client, session_id: uuid.UUID) -> str:
    return str(client.get(session_id).status)


def crash_twice(
    client: Client, deployment: LocalDeployment, tmp_path: Path, module: str, agent: str
) -> dict[str, Any]:
    """Run `agent` (of `module`)'s refund session through two SIGKILLs; what
    each counter saw."""
    with FakeOpenAI() as api:
        env = {"FAKE_OPENAI_URL": api.url}
        api.hold_at = 2  # the request after the lookup turn was committed
        first = deployment.worker(module, **env)
        deps = {"api": api.url, "gate": str(tmp_path)}
        session_id = client.start(agent, {"prompt": "refund o1", "deps": deps})
        assert api.held.wait(30), "the second model request never arrived"
        first.kill()
        api.release.set()

        (tmp_path / "hold-tool").touch()
        second = deployment.worker(module, **env)
        wait_until(lambda: status(client, session_id) == "suspended", what="the approval wait")
        pending = (client.get(session_id).state or {})["pending"]
        client.signal(session_id, "approval", {"approved": True})
        wait_until((tmp_path / "entered-tool-refund").exists, what="the refund tool")
        second.kill()
        (tmp_path / "hold-tool").unlink()

        deployment.worker(module, **env)
        wait_until(lambda: status(client, session_id) == "completed", what="completion")
        session = client.get(session_id)
        seen = _counted(api)
        return {
            "pending": pending,
            "result": session.result,
            "clean": _uncrashed_result(client, agent, api),
            **seen,
            "events": [e.type for e in client.events(session_id)],
        }


def pause_past_lease(
    client: Client, deployment: LocalDeployment, module: str, agent: str
) -> dict[str, Any]:
    """SIGSTOP a worker while its second model request is in flight, keep it
    stopped past its lease while another worker takes the session over and
    finishes it (the refund approved through a signal), then SIGCONT it and
    wait until it reaches its next write; what each counter saw."""
    with FakeOpenAI() as api:
        env = {"FAKE_OPENAI_URL": api.url}
        api.hold_at = 2  # the request after the lookup turn was committed
        zombie = deployment.worker(module, **env)
        session_id = client.start(agent, {"prompt": "refund o1", "deps": {"api": api.url}})
        assert api.held.wait(30), "the second model request never arrived"
        zombie.pause()
        api.release.set()  # its answer waits in the paused worker's socket

        deployment.worker(module, **env)  # takes over once the lease has expired
        wait_until(lambda: status(client, session_id) == "suspended", what="the takeover")
        client.signal(session_id, "approval", {"approved": True})
        wait_until(lambda: status(client, session_id) == "completed", what="completion")
        finished = client.get(session_id)

        zombie.resume()
        wait_until(
            lambda: "lease lost" in zombie.output() or "not committed" in zombie.output(),
            timeout=20,
            what="the paused worker's next write",
        )
        after = client.get(session_id)
        seen = _counted(api)
        return {
            **seen,
            "result": finished.result,
            "clean": _uncrashed_result(client, agent, api),
            "unchanged": (after.status, after.seq, after.result)
            == (finished.status, finished.seq, finished.result),
            "zombie": zombie.output(),
            "events": [e.type for e in client.events(session_id)],
        }


def _counted(api: FakeOpenAI) -> dict[str, Any]:
    """What the fake server and the tools' ledger saw."""
    return {
        "turns": dict(api.turns),
        "calls": dict(api.calls),
        "effects": [path for path, _ in api.order],
    }


def _uncrashed_result(client: Client, agent: str, api: FakeOpenAI) -> Any:
    """The output of an uncrashed run of the same agent, approved at once."""
    clean_id = client.start(agent, {"prompt": "refund o1", "deps": {"api": api.url}})
    client.signal(clean_id, "approval", {"approved": True})
    wait_until(lambda: status(client, clean_id) == "completed", what="the clean run")
    return client.get(clean_id).result
