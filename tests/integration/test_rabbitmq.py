"""RabbitMQ as the broker (``RESUMABLE_BROKER_URL=amqp://...``).

Every process of each test's deployment runs on a RabbitMQ node of this
module's own (``resumable/dev/disposable_rabbitmq.py``: Debian's
``rabbitmq-server``, which the README's test command installs when missing),
so a test can kill it and start it again. The fault matrix runs its whole
workload through the same faults with ``--broker rabbitmq`` (``.ci/run``);
here: a workload of every kind of session to the end, a restart of the node
in the middle of one, a stopping worker's hand-back, queue depth and
readiness read from RabbitMQ, and a worker or a command that cannot reach
it saying so in one line.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from resumable.broker.choice import build_broker
from resumable.broker.lanes import lanes
from resumable.broker.rabbitmq import RabbitBroker
from resumable.client import Client
from resumable.dev.disposable_rabbitmq import DisposableRabbitMQ
from resumable.models.database import Database
from resumable.settings import Settings
from tests.conftest import (
    API_TOKEN,
    LocalDeployment,
    delete_rabbitmq_queues,
    free_port,
    own_rabbitmq,
    run_cli,
    wait_until,
)
from tests.fake_api import FakeAPI
from tests.waiters import answer_waiters, approve, wait_suspended


@pytest.fixture(scope="module")
def rabbitmq() -> Iterator[DisposableRabbitMQ]:
    """This module's node: its tests kill it and start it again."""
    with own_rabbitmq() as node:
        yield node


@pytest.fixture
def rabbit_settings(settings: Settings, rabbitmq: DisposableRabbitMQ) -> Settings:
    """The test settings with RabbitMQ carrying the messages; its queues
    start empty (an earlier test's messages name sessions truncated since)."""
    delete_rabbitmq_queues(rabbitmq.url, settings.queue_name)
    return settings.model_copy(update={"broker_url": rabbitmq.url})


@pytest.fixture
def process_env(process_env: dict[str, str], rabbit_settings: Settings) -> dict[str, str]:
    """Every process of the deployment on RabbitMQ."""
    assert rabbit_settings.broker_url
    return {**process_env, "RESUMABLE_BROKER_URL": rabbit_settings.broker_url}


@pytest.fixture
def rabbit_client(rabbit_settings: Settings, db: Database) -> Iterator[Client]:
    broker = build_broker(rabbit_settings, rabbit_settings.redis_url or "")
    assert isinstance(broker, RabbitBroker)
    yield Client(rabbit_settings, db, broker)
    broker.close()


COUNTERS = 10
SIGNALLED = 4
SLEEPERS = 4
APPROVALS = 4
FLAKY = 3


def _start_workload(client: Client, api: FakeAPI, counters: Path) -> list[uuid.UUID]:
    """Every kind of session: steps with a charge each (some high priority,
    some low), signals, timers, callbacks through the web, and retries after
    a backoff (a delayed message on RabbitMQ's delay queue)."""
    levels = ["high", "normal", "low"]
    ids = [
        client.start("counter", {"api": api.url, "steps": 5}, priority=levels[n % 3])  # type: ignore[arg-type]
        for n in range(COUNTERS)
    ]
    ids += [
        client.start("flaky", {"api": api.url, "counter": str(counters / f"{n}"), "fail_times": 2})
        for n in range(FLAKY)
    ]
    ids += [client.start("sleeper", {"seconds": 0.5}) for _ in range(SLEEPERS)]
    return ids


def _all_complete(client: Client, ids: list[uuid.UUID], timeout: float = 90) -> None:
    wait_until(
        lambda: all(client.get(i).status == "completed" for i in ids),
        timeout,
        what="every session to complete",
    )


def _start_deployment(deployment: LocalDeployment) -> None:
    """A web process, two workers and a scheduler, all on RabbitMQ."""
    deployment.web()
    deployment.worker()
    deployment.worker()
    deployment.scheduler()


def test_a_workload_runs_to_the_end_on_rabbitmq(
    rabbit_client: Client, deployment: LocalDeployment, tmp_path: Path
) -> None:
    _start_deployment(deployment)
    client = rabbit_client
    with FakeAPI() as api:
        ids = _start_workload(client, api, tmp_path)
        waiting = [client.start("signalled", {"topic": "go"}) for _ in range(SIGNALLED)]
        approvals = [client.start("approval", {}) for _ in range(APPROVALS)]
        answer_waiters(client, waiting, approvals)
        _all_complete(client, [*ids, *waiting, *approvals])
        # One charge a counter step and one a flaky session (its retries
        # replay the recorded call): none twice.
        assert api.effect_count() == COUNTERS * 5 + FLAKY
    # Each flaky session failed twice and went again after its backoff.
    assert [(tmp_path / f"{n}").read_text() for n in range(FLAKY)] == ["3"] * FLAKY
    # Nothing was left in RabbitMQ: every message was acked.
    depths = client.broker.queue_depths([*lanes(client.settings.queue_name)])  # type: ignore[attr-defined]
    assert set(depths.values()) == {0}, depths


def test_a_rabbitmq_restart_mid_workload_loses_nothing(
    rabbit_client: Client,
    deployment: LocalDeployment,
    rabbitmq: DisposableRabbitMQ,
    tmp_path: Path,
) -> None:
    """kill -9 of the node while sessions run and callbacks arrive: the web
    stores callbacks and says it is not ready while RabbitMQ is down, every
    process reconnects when it is back, and every session completes with
    each effect made once; then a new batch runs on the same processes."""
    web = deployment.url
    _start_deployment(deployment)
    client = rabbit_client
    with FakeAPI() as api:
        approvals = [client.start("approval", {}) for _ in range(APPROVALS)]
        ids = _start_workload(client, api, tmp_path)
        wait_suspended(client, approvals, "the approvals to wait")
        rabbitmq.kill()
        ready = httpx.get(f"{web}/readyz", timeout=5)
        assert ready.status_code == 503, ready.text
        assert ready.json()["checks"]["broker"].startswith("error"), ready.json()
        for session_id in approvals:  # stored while the broker is down
            assert approve(client, session_id, timeout=15) == 202
        rabbitmq.start()
        wait_until(
            lambda: httpx.get(f"{web}/readyz", timeout=5).status_code == 200,
            30,
            what="the web to be ready again",
        )
        _all_complete(client, [*ids, *approvals], timeout=120)
        assert api.effect_count() == COUNTERS * 5 + FLAKY
        # Every process consumes and sends afterwards: a new batch runs.
        after = [client.start("counter", {"api": api.url, "steps": 2}) for _ in range(4)]
        _all_complete(client, after)
        assert api.effect_count() == COUNTERS * 5 + FLAKY + 4 * 2


def test_the_reconciler_s_reads_survive_a_restart_on_their_first_try(
    rabbit_client: Client, rabbitmq: DisposableRabbitMQ
) -> None:
    """A thread's connection from before the node restarted fails its first
    use: the reads the scheduler and /metrics make try once more on a new
    connection instead of failing a reconcile (each job thread's did, one
    warning each, in the fault matrix)."""
    broker = rabbit_client.broker
    assert isinstance(broker, RabbitBroker)
    queue = rabbit_client.settings.queue_name
    broker.messages_lost()  # declares the marker: this node has it now
    assert broker.queue_depths([queue]) == {queue: 0}
    rabbitmq.kill()
    rabbitmq.start()
    # The first read after the restart answers (it raised StreamLostError).
    # Whether the marker outlived a kill -9 so soon after its declaration is
    # RabbitMQ's affair (its metadata store syncs on its own schedule: lost
    # once on CI), and either answer is safe: True makes the reconciler
    # send every pending session again.
    assert broker.messages_lost() in (True, False)
    assert broker.messages_lost() is False  # declared again if it was lost
    assert broker.queue_depths([queue]) == {queue: 0}


def test_a_stopping_worker_hands_back_the_messages_it_holds(
    rabbit_client: Client, deployment: LocalDeployment
) -> None:
    """A worker with one thread busy in a long step holds the messages
    RabbitMQ delivered to it; on SIGTERM it gives them back at once, so a
    second worker runs them while the long step is still running."""
    client = rabbit_client
    first = deployment.worker(RESUMABLE_WORKER_THREADS="1", RESUMABLE_WORKER_PREFETCH="8")
    with FakeAPI() as api:
        long = client.start("counter", {"api": api.url, "steps": 1, "sleep": 10})
        wait_until(lambda: client.get(long).status == "running", 20, what="the long step")
        quick = [client.start("five", {}) for _ in range(4)]
        queue = client.settings.queue_name
        wait_until(
            lambda: client.broker.queue_depths([queue])[queue] == 0,  # type: ignore[attr-defined]
            10,
            what="RabbitMQ to deliver every message to the first worker",
        )
        deployment.worker()  # idle: RabbitMQ sends it only what comes back
        first.signal(signal.SIGTERM)
        wait_until(
            lambda: all(client.get(i).status == "completed" for i in quick),
            8,
            what="the second worker to run the handed-back sessions",
        )
        assert client.get(long).status == "running"  # still in its 10 s step on the first
        wait_until(lambda: client.get(long).status == "completed", 30, what="the long step")
        assert api.effect_count() == 1


def test_a_killed_worker_s_session_runs_again_when_its_lease_ends_with_no_scheduler(
    rabbit_client: Client, deployment: LocalDeployment, tmp_path: Path
) -> None:
    """RabbitMQ gives a SIGKILLed worker's message back at once, while the
    session's lease still runs: the worker it reaches sends it again for
    when the lease ends, rather than dropping it as a duplicate and leaving
    the session to the scheduler (none runs here)."""
    client = rabbit_client
    doomed = deployment.worker(RESUMABLE_WORKER_THREADS="1")
    (tmp_path / "hold").touch()
    with FakeAPI() as api:
        session_input = {"api": api.url, "steps": 2, "gate_dir": str(tmp_path), "hold_at": 1}
        session_id = client.start("counter", session_input)
        wait_until((tmp_path / "entered-count-1").exists, 20, what="the first step, held")
        deployment.worker()  # idle until RabbitMQ hands it the dead worker's message
        deployment.kill(doomed)
        (tmp_path / "hold").unlink()
        wait_until(
            lambda: client.get(session_id).status == "completed",
            15,  # the 2 s lease, a second step, with room for a loaded machine
            what="the session to complete on the second worker",
        )
        assert api.effect_count() == 2  # the first step's charge replayed, not made again


def test_queue_depth_is_read_from_rabbitmq(
    rabbit_client: Client, deployment: LocalDeployment
) -> None:
    """Sessions sent and not yet taken show in /metrics, by lane."""
    deployment.web()
    client = rabbit_client
    for _ in range(3):
        client.start("five", {})
    client.start("five", {}, priority="high")
    queue = client.settings.queue_name
    scraped = httpx.get(
        f"{deployment.url}/metrics", headers={"Authorization": f"Bearer {API_TOKEN}"}
    ).text
    assert f'resumable_queue_depth{{queue="{queue}"}} 3.0' in scraped
    assert f'resumable_queue_depth{{queue="{queue}.high"}} 1.0' in scraped


def test_an_unreachable_rabbitmq_stops_a_worker_and_a_command_in_one_line(
    client: Client,
) -> None:
    port = free_port()
    url = f"amqp://guest:guest@127.0.0.1:{port}/"
    started = time.monotonic()
    for args in (("worker", "--agents", "tests.agents"), ("enqueue", "five")):
        result = run_cli(client.settings, *args, timeout=30, RESUMABLE_BROKER_URL=url)
        assert result.returncode != 0
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, result.stderr
        for fragment in (f"127.0.0.1:{port}", "RESUMABLE_BROKER_URL", "Connection refused"):
            assert fragment in lines[0], lines[0]
        assert "Traceback" not in result.stderr
    assert time.monotonic() - started < 20
    assert client.count_by_status() == {}  # the enqueue wrote nothing
