"""Child sessions: fan-out and fan-in under SIGKILLs, the dead-letter
policies, and cancelling a parent."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

from resumable.client import Client
from resumable.coordination import children
from resumable.models import coordination_queries
from resumable.models.database import Database
from resumable.settings import Settings
from tests.conftest import LocalDeployment, run_cli, wait_until
from tests.fake_api import FakeAPI

AGENTS = "tests.coordination_agents"


def _events(client: Client, session_id: uuid.UUID, kind: str) -> list[dict[str, object]]:
    return [e.payload for e in client.events(session_id) if e.type == kind]


def test_fan_out_of_200_children_and_fan_in_under_sigkills(
    client: Client, db: Database, reconciler: None, deployment: LocalDeployment
) -> None:
    workers = [deployment.worker(AGENTS), deployment.worker(AGENTS)]
    with FakeAPI() as api:
        parent = client.start("planner", {"children": 200, "child": {"api": api.url}})
        wait_until(lambda: api.effect_count() >= 20, what="the first children")
        at_kills: list[int] = []
        deadline = time.monotonic() + 120
        while client.get(parent).status != "completed":
            assert time.monotonic() < deadline, client.get(parent)
            if len(at_kills) < 3:  # a victim now and every 2 s while work remains
                at_kills.append(api.effect_count())
                deployment.kill(workers.pop(0))
                workers.append(deployment.worker(AGENTS))
            time.sleep(2.0)
        effects, calls = api.effect_count(), api.total_calls()

    assert at_kills[0] < 200, "no worker was killed mid-run: nothing was tested"
    assert client.get(parent).result == {"results": 200, "failures": [], "sum": sum(range(200))}
    # The parent resumed once, and its fan-in step committed once.
    assert len(_events(client, parent, "resumed")) == 1
    fan_ins = [e for e in client.events(parent) if e.type == "step_completed"]
    assert [e.step for e in fan_ins] == ["fan_out", "fan_in"]
    # Each child was created once and its side effect happened once.
    children = client.page_sessions(parent=parent, limit=500).items
    assert len(children) == 200 and all(c.parent_id == parent for c in children)
    assert all(c.status == "completed" and c.seq == 1 for c in children)
    assert effects == 200
    assert calls >= 200


def test_a_dead_lettered_child_holds_the_parent_until_it_is_retried(
    client: Client, tmp_path: Path, deployment: LocalDeployment
) -> None:
    deployment.worker(AGENTS)
    flag = tmp_path / "fail"
    flag.touch()
    parent = client.start(
        "planner", {"children": 3, "on_failure": "wait", "child": {"fail_while": str(flag)}}
    )
    wait_until(lambda: len(client.dead_letters().items) == 1, what="child 0's dead letter")
    letter = client.dead_letters().items[0]
    wait_until(
        lambda: (
            len([c for c in client.page_sessions(parent=parent).items if c.status == "completed"])
            == 2
        ),
        what="the other children",
    )
    assert client.get(parent).status == "suspended"  # policy "wait": still waiting

    flag.unlink()
    client.retry_dead_letter(letter.dead_letter_id, actor="test")
    wait_until(lambda: client.get(parent).status == "completed", what="the parent")
    assert client.get(parent).result == {"results": 3, "failures": [], "sum": 3}


def test_a_dead_lettered_child_informs_the_parent_by_default(
    client: Client, tmp_path: Path, deployment: LocalDeployment
) -> None:
    deployment.worker(AGENTS)
    flag = tmp_path / "fail"
    flag.touch()
    parent = client.start("planner", {"children": 3, "child": {"fail_while": str(flag)}})
    wait_until(lambda: client.get(parent).status == "completed", what="the parent")
    assert client.get(parent).result == {"results": 2, "failures": ["failed"], "sum": 3}


def test_cancelling_a_parent_cancels_its_children(
    client: Client, settings: Settings, deployment: LocalDeployment
) -> None:
    deployment.worker(AGENTS)
    parent = client.start("planner", {"children": 3, "child": {"wait_signal": True}})

    def children_waiting() -> bool:
        kids = client.page_sessions(parent=parent).items
        return len(kids) == 3 and all(c.status == "suspended" for c in kids)

    wait_until(children_waiting, what="three waiting children")
    client.cancel(parent, actor="test")
    kids = client.page_sessions(parent=parent).items
    assert {c.status for c in kids} == {"cancelled"}
    assert client.get(parent).status == "cancelled"
    listed = run_cli(settings, "sessions", "list", "--parent", str(parent)[:8], "--json")
    assert listed.returncode == 0, listed.stderr
    page = json.loads(listed.stdout)
    assert sorted(item["session_id"] for item in page["items"]) == sorted(
        str(c.session_id) for c in kids
    )
    assert {item["parent_id"] for item in page["items"]} == {str(parent)}


def test_a_stored_wait_on_a_child_id_that_is_no_uuid_does_not_stop_the_backstop(
    client: Client, db: Database
) -> None:
    """A parent stored (before Children(...) checked its ids) waiting on
    "not-a-uuid" sorts first among the waiting parents; the scheduler's
    backstop must still wake the parent after it whose child has finished."""
    done_child, bad_parent, good_parent = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    with db.connection() as conn:
        conn.execute(
            """
            INSERT INTO sessions (id, agent, status, cursor, state, wait, updated_at, parent_id,
                                  result, finished_at)
            VALUES (%(bad)s, 'kids', 'suspended', 'gather', '{}',
                    '{"then": "gather", "children": {"ids": ["not-a-uuid"], "need": 1,
                      "on_failure": "inform"}}', now() - interval '2 minutes', NULL, NULL, NULL),
                   (%(good)s, 'kids', 'suspended', 'gather', '{}',
                    jsonb_build_object('then', 'gather', 'children', jsonb_build_object(
                      'ids', jsonb_build_array(%(child)s::text), 'need', 1,
                      'on_failure', 'inform')), now() - interval '1 minute', NULL, NULL, NULL),
                   (%(child)s, 'kids', 'completed', NULL, '{}', NULL, now(), %(good)s,
                    '{"n": 1}', now())
            """,
            {"bad": bad_parent, "good": good_parent, "child": done_child},
        )
    assert children.wake_waiting_parents(db, client.broker, client.settings) == 1
    assert client.get(good_parent).status == "pending"
    assert client.get(bad_parent).status == "suspended"


def test_the_waiting_parents_backstop_reads_only_the_waiting_parents(db: Database) -> None:
    """The scheduler asks for parents waiting on children every tick; sessions
    in other long waits (timers days away, unanswered callbacks) must not be
    read to answer it, or every tick costs every suspended session (59 ms at
    200,000 through the status index, measured before migration 0017)."""
    with db.connection() as conn:
        conn.execute(
            """
            INSERT INTO sessions (id, agent, status, cursor, state, wait, wake_at, updated_at)
            SELECT gen_random_uuid(), 'sleeper', 'suspended', 'nap', '{}',
                   jsonb_build_object('then', 'nap', 'timer_at', now() + interval '3 days'),
                   now() + interval '3 days', now() - i * interval '1 second'
            FROM generate_series(1, 5000) AS i
            """
        )
        conn.execute(
            """
            INSERT INTO sessions (id, agent, status, cursor, state, wait, updated_at)
            SELECT gen_random_uuid(), 'kids', 'suspended', 'gather', '{}',
                   jsonb_build_object('then', 'gather', 'children', jsonb_build_object(
                     'ids', jsonb_build_array(gen_random_uuid()::text), 'need', 1,
                     'on_failure', 'inform')), now() - interval '1 hour'
            FROM generate_series(1, 3)
            """
        )
        conn.execute("ANALYZE sessions")
        explained = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + coordination_queries.WAITING_PARENTS,
            {"limit": 500},
        ).fetchone()
    assert explained is not None
    plan: Any = next(iter(explained.values()))  # the one column: the plan, as JSON
    top = plan[0]["Plan"]
    assert top["Actual Rows"] == 3
    touched = top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)
    # Three rows on one or two heap pages and a small index: a walk of the
    # 5,000 sleepers reads over a hundred.
    assert touched <= 10, json.dumps(plan, indent=1)
