"""Concurrency keys (resumable/limits.py) on real workers: a key's limit
holds, its waiters start in the order they began to wait and hold no
worker, keys do not starve each other, a suspended session holds no slot,
and a slot held by a SIGKILLed worker frees with its lease."""

from __future__ import annotations

import html
import json
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

from starlette.applications import Starlette
from starlette.testclient import TestClient

from resumable.client import Client
from resumable.dev.fake_server import FakeServer, Reply, Request
from resumable.models.database import Database
from resumable.services import slots
from resumable.services.narration import doing_now
from resumable.settings import Settings
from resumable.webhooks.metrics import DatabaseCollector
from tests.conftest import API_TOKEN, LocalDeployment, run_cli, wait_until
from tests.integration.test_console_routes import log_in

AGENTS = "tests.limited_agents"


class Turnstile(FakeServer):
    """Counts, per key, the steps inside at once (POST /enter, /leave)."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.inside: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.entered: list[tuple[str, str, float]] = []  # (key, session, monotonic)

    def handle(self, request: Request) -> Reply:
        body = request.json()
        key = body["key"]
        with self.lock:
            if request.path == "/enter":
                self.inside[key] += 1
                self.most[key] = max(self.most[key], self.inside[key])
                self.entered.append((key, body["session"], time.monotonic()))
            else:
                self.inside[key] -= 1
        return Reply(200, {})

    def entries(self, key: str) -> list[str]:
        with self.lock:
            return [session for k, session, _ in self.entered if k == key]


def _status(client: Client, ids: list[uuid.UUID]) -> Counter[str]:
    return Counter(client.get(session_id).status for session_id in ids)


def _event_ids(client: Client, session_id: uuid.UUID, kind: str) -> list[int]:
    return [e.event_id for e in client.events(session_id) if e.type == kind]


def test_a_keys_limit_holds_its_waiters_start_in_order_and_other_keys_go_ahead(
    client: Client, db: Database, deployment: LocalDeployment
) -> None:
    with Turnstile() as turnstile:
        # Two worker processes: the limit holds across them.
        deployment.worker(AGENTS, RESUMABLE_WORKER_THREADS="3")
        deployment.worker(AGENTS, RESUMABLE_WORKER_THREADS="3")
        busy = [
            client.start("per-tenant", {"tenant": "a", "turnstile": turnstile.url, "seconds": 0.3})
            for _ in range(8)
        ]
        # Started after the whole backlog of "a": its own limit, its own line.
        others = [
            client.start("per-tenant", {"tenant": "b", "turnstile": turnstile.url, "seconds": 0.3})
            for _ in range(2)
        ]
        wait_until(
            lambda: _status(client, busy + others)["completed"] == 10, timeout=60, what="all ten"
        )

        assert turnstile.most["a"] == 2  # the limit, and used in full
        assert turnstile.most["b"] <= 2
        entered = turnstile.entries("a")
        assert sorted(entered) == sorted(str(s) for s in busy)  # each ran once
        # "b" did not wait behind the backlog of "a": both ran before the last of "a".
        last_a = max(at for key, _, at in turnstile.entered if key == "a")
        assert all(at < last_a for key, _, at in turnstile.entered if key == "b")

    # The ones that waited started in the order they began to wait: two
    # slots freed at once admit two waiters, which may claim in either order,
    # but none starts ahead of a waiter two places before it.
    waited = [s for s in busy if _event_ids(client, s, "slot_waiting")]
    assert len(waited) >= 4  # 8 sessions, 2 slots: most of them waited
    by_wait = sorted(waited, key=lambda s: _event_ids(client, s, "slot_waiting")[0])
    by_start = sorted(waited, key=lambda s: _event_ids(client, s, "run_started")[-1])
    assert all(abs(by_start.index(s) - place) < 2 for place, s in enumerate(by_wait)), (
        by_wait,
        by_start,
    )
    payload = next(e.payload for e in client.events(waited[0]) if e.type == "slot_waiting")
    assert payload["key"] == '["per-tenant", "a"]'
    assert payload["limit"] == 2
    # Nothing waits any more; the usage the console shows is empty of waiters.
    assert all(usage.waiting == 0 for usage in slots.usage(db))


def test_a_waiting_session_holds_no_worker_and_a_suspended_one_holds_no_slot(
    client: Client,
    db: Database,
    settings: Settings,
    app: Starlette,
    deployment: LocalDeployment,
    tmp_path: Path,
) -> None:
    hold = tmp_path / "hold"
    hold.touch()
    with Turnstile() as turnstile:
        # Two threads: one held by the slot's holder; the waiter must not take the other.
        deployment.worker(AGENTS, RESUMABLE_WORKER_THREADS="2")
        held = client.start(
            "one-at-a-time",
            {"turnstile": turnstile.url, "hold": str(hold), "wait_for_signal": True},
        )
        wait_until(lambda: len(turnstile.entries("None")) == 1, what="the holder inside")
        waiter = client.start("one-at-a-time", {"turnstile": turnstile.url, "seconds": 0})
        wait_until(lambda: _event_ids(client, waiter, "slot_waiting"), what="the waiter parked")
        row = client.session_row(waiter)
        assert row.status == "pending" and row.slot_wait_since is not None
        assert row.lease_owner is None
        _assert_an_operator_sees_the_wait(client, db, settings, app, waiter)
        # The other thread is free: a session of another tenant runs meanwhile.
        free = client.start("per-tenant", {"tenant": "c", "turnstile": turnstile.url})
        wait_until(lambda: client.get(free).status == "completed", what="another key's run")
        assert client.get(waiter).status == "pending"

        # The holder leaves its step and suspends for a signal: the slot frees.
        hold.unlink()
        wait_until(lambda: client.get(waiter).status == "completed", what="the waiter's run")
        assert client.get(held).status == "suspended"
        assert client.session_row(waiter).slot_wait_since is None
        client.signal(held, "go")
        wait_until(lambda: client.get(held).status == "completed", what="the signalled run")
    assert turnstile.most["None"] == 1


def _assert_an_operator_sees_the_wait(
    client: Client, db: Database, settings: Settings, app: Starlette, waiter: uuid.UUID
) -> None:
    """The API's session, its one-line narration, the console, the CLI and /metrics."""
    key = '["one-at-a-time"]'
    session = client.get(waiter)
    assert session.slot_wait is not None
    assert (session.slot_wait.key, session.slot_wait.limit) == (key, 1)
    assert doing_now(session).startswith(f"waiting for a slot of {key}, 1 at a time: ")
    with TestClient(app, follow_redirects=False) as browser:
        log_in(browser)
        page = browser.get(f"/ui/sessions/{waiter}")
        assert page.status_code == 200
        assert "waiting for a slot of" in html.unescape(page.text)
        assert key in html.unescape(page.text)
        workers = browser.get("/ui/workers")
        assert workers.status_code == 200
        assert 'id="concurrency-keys"' in workers.text
        assert key in html.unescape(workers.text)
    [usage] = client.concurrency_keys()
    assert (usage.key, usage.limit, usage.running, usage.waiting) == (key, 1, 1, 1)
    with TestClient(app) as api:
        answer = api.get("/v1/concurrency-keys", headers={"Authorization": f"Bearer {API_TOKEN}"})
    assert answer.status_code == 200, answer.text
    [item] = answer.json()["items"]
    assert (item["key"], item["limit"], item["running"], item["waiting"]) == (key, 1, 1, 1)
    listed = run_cli(settings, "concurrency", "--json")
    assert listed.returncode == 0, listed.stderr
    [item] = json.loads(listed.stdout)["items"]
    assert (item["key"], item["running"], item["waiting"]) == (key, 1, 1)
    samples = {
        (sample.name, sample.labels.get("key")): sample.value
        for family in DatabaseCollector(db).collect()
        for sample in family.samples
    }
    assert samples[("resumable_concurrency_waiting", key)] == 1
    assert samples[("resumable_concurrency_running", key)] == 1
    assert samples[("resumable_concurrency_limit", key)] == 1


def test_a_slot_held_by_a_killed_worker_frees_with_its_lease(
    client: Client, deployment: LocalDeployment, tmp_path: Path
) -> None:
    hold = tmp_path / "hold"
    hold.touch()
    with Turnstile() as turnstile:
        victim = deployment.worker(AGENTS)
        held = client.start("one-at-a-time", {"turnstile": turnstile.url, "hold": str(hold)})
        wait_until(lambda: len(turnstile.entries("None")) == 1, what="the holder inside")
        waiter = client.start("one-at-a-time", {"turnstile": turnstile.url, "seconds": 0})
        wait_until(lambda: _event_ids(client, waiter, "slot_waiting"), what="the waiter parked")
        victim.kill()
        hold.unlink()
        killed_at = time.monotonic()
        deployment.worker(AGENTS)
        deployment.scheduler()
        wait_until(
            lambda: _status(client, [held, waiter])["completed"] == 2,
            timeout=45,
            what="both sessions, after the kill",
        )
        entries = turnstile.entries("None")
    # The waiter ran after the kill, once; the killed run's session ran again.
    assert entries.count(str(waiter)) == 1
    assert entries.count(str(held)) == 2
    waiter_entered = next(at for _, s, at in turnstile.entered if s == str(waiter))
    assert waiter_entered > killed_at
    assert client.session_row(waiter).slot_wait_since is None


def test_a_steps_own_limit_holds_for_that_step_only(
    client: Client, deployment: LocalDeployment
) -> None:
    with Turnstile() as turnstile:
        deployment.worker(AGENTS, RESUMABLE_WORKER_THREADS="6")
        ids = [
            client.start(
                "step-limited", {"tenant": "a", "turnstile": turnstile.url, "seconds": 0.2}
            )
            for _ in range(4)
        ]
        wait_until(lambda: _status(client, ids)["completed"] == 4, timeout=60, what="all four")
    assert turnstile.most["a"] == 1
    assert sorted(turnstile.entries("a")) == sorted(str(s) for s in ids)
    for session_id in ids:
        assert client.get(session_id).result == {"prepared": True}
        events = client.events(session_id)
        # The run ends before the limited step and after it: the slot is held for it alone.
        reasons = [e.payload.get("reason") for e in events if e.type == "run_yielded"]
        assert reasons == ["concurrency slot", "concurrency slot"]
        waits = [e.payload for e in events if e.type == "slot_waiting"]
        assert all(w["key"] == '[["step-limited", "call"], "a"]' for w in waits)
    assert any(e.type == "slot_waiting" for s in ids for e in client.events(s))


def test_a_long_key_value_is_held_as_its_digest(
    client: Client, deployment: LocalDeployment
) -> None:
    """An index entry holds 2.7 KB: a longer input value still makes a key."""
    with Turnstile() as turnstile:
        deployment.worker(AGENTS)
        tenants = ["x" * 5000, "x" * 4999 + "y"]
        ids = [
            client.start("per-tenant", {"tenant": t, "turnstile": turnstile.url, "seconds": 0})
            for t in tenants
        ]
        wait_until(lambda: _status(client, ids)["completed"] == 2, what="both sessions")
    keys = {e.payload.get("key") for s in ids for e in client.events(s) if e.type == "slot_waiting"}
    rows = [client.session_row(s).concurrency_key for s in ids]
    assert all(key is not None and len(key) < 200 and "md5:" in key for key in rows), rows
    assert rows[0] != rows[1]  # two values, two keys
    assert keys <= set(rows)


def test_a_session_taken_over_by_a_limited_version_runs_in_a_slot(
    client: Client, deployment: LocalDeployment
) -> None:
    """A takeover claims without a slot: the run goes back to the queue
    before its step and is claimed again under the new version's limit."""
    old = deployment.worker("tests.limited_versions", LIMITED_AGENT_VERSION="1")
    session_id = client.start("migrating", {})
    wait_until(lambda: client.get(session_id).status == "suspended", what="the v1 wait")
    old.stop()
    deployment.worker("tests.limited_versions", LIMITED_AGENT_VERSION="2")
    client.signal(session_id, "go")
    wait_until(lambda: client.get(session_id).status == "completed", what="the v2 run")

    assert client.get(session_id).result == {"version": 1, "migrated": True}  # started on v1
    kinds = [e.type for e in client.events(session_id)]
    migrated = kinds.index("session_migrated")
    assert "step_completed" not in kinds[migrated:][:2]  # nothing ran before the hand-back
    assert client.session_row(session_id).concurrency_key == '["migrating"]'
