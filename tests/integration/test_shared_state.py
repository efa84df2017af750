"""Shared documents: atomic updates that commit with the step, under real
workers SIGKILLed mid-run."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from starlette.applications import Starlette
from starlette.testclient import TestClient

from resumable import AsyncClient, SharedDocument, SharedVersion
from resumable.client import Client
from resumable.models.database import Database
from resumable.scheduler.retention import retire_old_shared_versions
from resumable.settings import Settings
from tests.conftest import API_TOKEN, LocalDeployment, run_cli, wait_until

AGENTS = "tests.coordination_agents"


def _statuses(db: Database, ids: list[uuid.UUID]) -> dict[str, int]:
    with db.connection() as conn:
        rows = conn.execute(
            "SELECT status, count(*) AS n FROM sessions WHERE id = ANY(%s) GROUP BY status",
            [ids],
        ).fetchall()
    return {str(r["status"]): int(str(r["n"])) for r in rows}


def test_contended_counter_under_sigkills_counts_every_committed_step_once(
    client: Client, db: Database, reconciler: None, deployment: LocalDeployment
) -> None:
    sessions, times = 100, 10
    workers = [deployment.worker(AGENTS), deployment.worker(AGENTS)]
    ids = [client.start("shared_incrementer", {"times": times}) for _ in range(sessions)]

    def committed() -> int:
        document = client.shared("counter")
        return 0 if document is None else document.version

    wait_until(lambda: committed() >= 50, what="the first updates")
    at_kills: list[int] = []
    deadline = time.monotonic() + 120
    while _statuses(db, ids).get("completed", 0) < sessions:
        assert time.monotonic() < deadline, f"not done: {_statuses(db, ids)}"
        if len(at_kills) < 4:  # a victim now and every 2 s while work remains
            at_kills.append(committed())
            deployment.kill(workers.pop(0))
            workers.append(deployment.worker(AGENTS))
        time.sleep(2.0)
    assert at_kills[0] < sessions * times, "no worker was killed mid-run: nothing was tested"

    document = client.shared("counter")
    assert document is not None
    assert document.value == sessions * times
    assert document.version == sessions * times
    with db.connection() as conn:
        writers = conn.execute(
            "SELECT count(DISTINCT (session_id, seq)) AS n FROM shared_versions "
            "WHERE name = 'counter'"
        ).fetchone()
        audited = conn.execute(
            "SELECT count(*) AS n FROM audit_events WHERE event_type = 'shared_updated'"
        ).fetchone()
    assert writers is not None and writers["n"] == sessions * times
    assert audited is not None and audited["n"] == sessions * times
    history = client.shared_history("counter", limit=3)
    assert [v.value for v in history] == [1000, 999, 998]
    assert all(v.step == "increment" for v in history)

    async def read_async() -> tuple[SharedDocument | None, list[SharedVersion]]:
        async with AsyncClient(client) as resumable:
            return await resumable.shared("counter"), await resumable.shared_history(
                "counter", limit=2, before=999
            )

    # The same reads for an asyncio application (once missing from AsyncClient).
    async_document, async_history = asyncio.run(read_async())
    assert async_document == document
    assert [v.value for v in async_history] == [998, 997]


def test_a_failed_step_commits_none_of_its_updates(
    client: Client, deployment: LocalDeployment
) -> None:
    deployment.worker(AGENTS)
    failed = client.start("shared_failing", {})
    wait_until(lambda: client.get(failed).status == "failed", what="the step to fail")
    assert client.shared("never") is None
    assert client.shared_history("never") == []


def test_a_step_reads_its_own_update_and_later_steps_see_it(
    client: Client, settings: Settings, app: Starlette, deployment: LocalDeployment
) -> None:
    deployment.worker(AGENTS)
    first = client.start("shared_reader", {"key": "a"})
    wait_until(lambda: client.get(first).status == "completed", what="first reader")
    second = client.start("shared_reader", {"key": "b"})
    wait_until(lambda: client.get(second).status == "completed", what="second reader")
    assert client.get(first).result == {"before": {}, "preview": {"a": True}, "after": {"a": True}}
    assert client.get(second).result == {
        "before": {"a": True},
        "preview": {"a": True, "b": True},
        "after": {"a": True, "b": True},
    }
    events = [e for e in client.events(second) if e.type == "shared_updated"]
    assert [e.payload for e in events] == [{"name": "doc", "version": 2}]

    with TestClient(app, raise_server_exceptions=False) as http:
        auth = {"authorization": f"Bearer {API_TOKEN}"}
        document = http.get("/v1/shared/doc", headers=auth)
        assert document.status_code == 200
        assert document.json()["value"] == {"a": True, "b": True}
        page = http.get("/v1/shared/doc/history?limit=1", headers=auth).json()
        assert [v["version"] for v in page["items"]] == [2] and page["next_cursor"] == "2"
        older = http.get(f"/v1/shared/doc/history?cursor={page['next_cursor']}", headers=auth)
        assert [v["session_id"] for v in older.json()["items"]] == [str(first)]
        missing_doc = http.get("/v1/shared/nope", headers=auth)
        assert missing_doc.status_code == 404
        assert missing_doc.json()["error"]["code"] == "shared_document_not_found"
        assert http.get("/v1/shared/doc").status_code == 401
        too_long = http.get("/v1/shared/" + "x" * 201, headers=auth)
        assert too_long.status_code == 404
    shown = run_cli(settings, "shared", "show", "doc")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["version"] == 2
    history = run_cli(settings, "shared", "history", "doc")
    lines = [json.loads(line) for line in history.stdout.splitlines()]
    assert [(v["version"], v["session_id"], v["step"]) for v in lines] == [
        (2, str(second), "read_own_write"),
        (1, str(first), "read_own_write"),
    ]
    missing = run_cli(settings, "shared", "show", "nothing-here")
    assert missing.returncode == 1 and "nothing-here" in missing.stderr
    assert "Traceback" not in missing.stderr
    bad = run_cli(settings, "shared", "history", "x" * 300)
    assert bad.returncode == 2 and "at most 200" in bad.stderr


def test_retention_deletes_old_versions_but_never_a_documents_current_one(
    client: Client, db: Database, deployment: LocalDeployment
) -> None:
    deployment.worker(AGENTS)
    counters = [
        client.start("shared_incrementer", {"counter": name, "times": 3}) for name in ("a", "b")
    ]
    wait_until(
        lambda: all(client.get(s).status == "completed" for s in counters), what="the counters"
    )
    with db.connection() as conn:  # a's whole history is old; b's is recent
        conn.execute(
            "UPDATE shared_versions SET created_at = now() - interval '10 days' WHERE name = 'a'"
        )
    settings = client.settings.model_copy(update={"retention_days": 7})
    assert retire_old_shared_versions(settings, db) == 2
    assert retire_old_shared_versions(settings, db) == 0
    assert [v.version for v in client.shared_history("a")] == [3]
    assert [v.version for v in client.shared_history("b")] == [3, 2, 1]
    assert client.shared("a") is not None and client.shared("a").value == 3  # type: ignore[union-attr]
    unset = client.settings.model_copy(update={"retention_days": None})
    assert retire_old_shared_versions(unset, db) == 0
