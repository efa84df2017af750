"""Invariant 10: a Redis that is killed and started again (every key gone,
every connection dropped) leaves every worker consuming, with nothing lost and
no step run twice, and no worker needing a restart."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from resumable.broker.choice import build_broker
from resumable.client import Client
from resumable.dev.disposable_redis import DisposableRedis
from resumable.models.database import Database
from resumable.settings import Settings
from tests.conftest import LocalDeployment, wait_until


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[DisposableRedis]:
    with DisposableRedis(tmp_path / "valkey") as server:
        yield server


@pytest.fixture
def own_client(settings: Settings, db: Database, own_redis: DisposableRedis) -> Iterator[Client]:
    broker = build_broker(settings, own_redis.url)
    yield Client(settings, db, broker)
    broker.close()


def _statuses(db: Database, ids: list[uuid.UUID]) -> dict[str, int]:
    with db.connection() as conn:
        rows: list[Any] = cast(
            list[Any],
            conn.execute(
                "SELECT status, count(*) AS n FROM sessions WHERE id = ANY(%s) GROUP BY status",
                (ids,),
            ).fetchall(),
        )
    return {str(row["status"]): int(row["n"]) for row in rows}


def _steps_committed(db: Database, ids: list[uuid.UUID]) -> list[tuple[uuid.UUID, list[int]]]:
    with db.connection() as conn:
        rows: list[Any] = cast(
            list[Any],
            conn.execute(
                "SELECT session_id, array_agg(seq ORDER BY seq) AS seqs FROM checkpoints"
                " WHERE session_id = ANY(%s) GROUP BY session_id",
                (ids,),
            ).fetchall(),
        )
    return [(row["session_id"], list(row["seqs"])) for row in rows]


def test_redis_killed_and_started_again_leaves_the_worker_consuming(
    own_client: Client, own_redis: DisposableRedis, db: Database, deployment: LocalDeployment
) -> None:
    worker = deployment.worker(REDIS_URL=own_redis.url)
    deployment.scheduler(REDIS_URL=own_redis.url)
    steps = 6
    ids = [own_client.start("counter", {"steps": steps, "sleep": 0.2}) for _ in range(40)]
    wait_until(
        lambda: _statuses(db, ids).get("completed", 0) >= 1 or _in_flight(db, ids),
        what="sessions in flight",
    )
    own_redis.kill()
    time.sleep(4)  # down for a while: every consumer's fetch fails meanwhile
    own_redis.start()
    wait_until(
        lambda: _statuses(db, ids).get("completed", 0) == len(ids),
        timeout=90,
        what=f"all sessions completed after the restart (now {_statuses(db, ids)})",
    )
    assert worker.proc.poll() is None, worker.tail(40)
    assert "Exception in thread" not in worker.output(), worker.tail(80)
    for session_id, seqs in _steps_committed(db, ids):
        assert seqs == list(range(1, steps + 1)), session_id

    # Still consuming, through the same consumer, without a restart: a new
    # session runs at once.
    later = own_client.start("counter", {"steps": 2})
    wait_until(lambda: own_client.get(later).status == "completed", timeout=15, what="a new run")


def _in_flight(db: Database, ids: list[uuid.UUID]) -> bool:
    with db.connection() as conn:
        row: Any = cast(
            Any,
            conn.execute(
                "SELECT count(*) AS n FROM checkpoints WHERE session_id = ANY(%s)", (ids,)
            ).fetchone(),
        )
    return row is not None and int(row["n"]) >= 20
