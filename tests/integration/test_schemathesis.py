"""The API keeps the contract its OpenAPI document states, against real
servers: a real ``resumable web`` process and a real worker over the test
PostgreSQL and Redis, fuzzed by schemathesis from ``/openapi.json``.

Every operation, every built-in check: no 5xx, no status code the document
does not list, every response matching its schema (headers and content type
too), invalid requests refused, valid requests accepted, 401 without the
token, 405 with ``Allow`` for undeclared methods. Then the links
(create -> get -> events -> signal/cancel) are walked statefully.

Bounded in time: a fixed number of examples per operation (derandomized) and
of linked scenarios (seeded), so the run is reproducible and takes about half
a minute on two cores.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import hypothesis
import pytest
import redis
import requests
import schemathesis
from schemathesis.specs.openapi.checks import positive_data_acceptance
from schemathesis.transport.requests import ManagedCookiesSession

from resumable._internal.embedded import ServiceURLs
from resumable.broker.choice import build_broker
from resumable.client import Client
from resumable.dev.processes import Deployment
from resumable.models.database import Database
from resumable.services.inbox import Inbox
from resumable.settings import Settings
from tests.conftest import (
    API_TOKEN,
    ROOT,
    START_TIMEOUT,
    TEST_HOME,
    WORKER_ENV,
    free_port,
    truncate_all,
    wait_until,
)

AUTH = {"Authorization": f"Bearer {API_TOKEN}"}
Case = schemathesis.Case[Any]
EXAMPLES_PER_OPERATION = 25
STATEFUL_SCENARIOS = 30
STATEFUL_STEPS = 8

# Valid requests the server may still refuse, because what makes them wrong
# is not in the request but in the server's data, which no static schema can
# describe. Each is (operationId, status, error code).
REFUSED_BY_DATA = {
    # Agents are registered at run time by workers; the schema can only say
    # what an agent name looks like, not which names a worker has announced.
    ("createSession", 422, "unknown_agent"),
    ("createSchedule", 422, "unknown_agent"),
    # A schedule's cron expression has a grammar and its time zone must be
    # in the IANA database, and it takes `cron` or `every_seconds`, not both
    # or neither: checked past the schema (resumable/schedules.py).
    ("createSchedule", 422, "invalid_schedule"),
    # A name is taken by what earlier requests created.
    ("createSchedule", 409, "schedule_exists"),
    # A cursor is opaque: the schema says what it looks like, not which ones
    # this API handed out (the sessions cursor encodes a position).
    ("listSessions", 400, "invalid_cursor"),
    # An RFC 6902 patch is valid or not only against the state it patches.
    ("forkSession", 422, "invalid_state_patch"),
    ("retryDeadLetter", 422, "invalid_state_patch"),
    # A paced drain must fit in one request's time: a bound on limit / rate,
    # a relation between two fields that JSON Schema cannot state.
    ("drainDeadLetters", 422, "drain_too_slow"),
}


@schemathesis.check
def accepts_valid_requests(ctx: Any, response: Any, case: Case) -> bool | None:
    """schemathesis's positive_data_acceptance (disabled in the config below,
    as this replaces it), but for the refusals above."""
    operation_id = case.operation.definition.raw.get("operationId")
    if response.status_code in (400, 409, 422):
        code = response.json().get("error", {}).get("code")
        if (operation_id, response.status_code, code) in REFUSED_BY_DATA:
            return None
    result: bool | None = positive_data_acceptance(ctx, response, case)
    return result


@pytest.fixture(scope="module")
def api_server(urls: ServiceURLs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A web process and a worker, with sessions in several states and a dead
    letter, so reads return real records. No webhook secret: schemathesis
    cannot sign, and without one callbacks are checked past the signature
    (the signature's 401s are tested in test_http_api.py)."""
    logs = tmp_path_factory.mktemp("schemathesis")
    settings = Settings(database_url=urls.database_url, redis_url=urls.redis_url, home=TEST_HOME)
    db = Database(urls.database_url, pool_size=2)
    truncate_all(db)
    with redis.Redis.from_url(urls.redis_url) as queue:
        queue.flushdb()
    port = free_port()
    env = {
        "RESUMABLE_PUBLIC_URL": f"http://127.0.0.1:{port}",
        "RESUMABLE_API_TOKENS": API_TOKEN,
        "RESUMABLE_WEBHOOK_SECRET": "",
    }
    processes = Deployment(
        {
            **WORKER_ENV,
            **env,
            "DATABASE_URL": urls.database_url,
            "REDIS_URL": urls.redis_url,
            "PYTHONPATH": str(ROOT),
        },
        logs,
        cwd=ROOT,
    )
    processes.worker("tests.api_agents").wait_ready(START_TIMEOUT)
    processes.web(port).wait_ready(START_TIMEOUT)
    broker = build_broker(settings, urls.redis_url)
    client = Client(settings, db, broker)
    try:
        waiting = client.start("support", {"amount": 500})
        approved = client.start("support", {"amount": 20})
        failed = client.start("fragile", {"flag": str(Path(logs) / "missing")})
        wait_until(
            lambda: (
                client.get(waiting).status == "suspended"
                and client.get(approved).status == "suspended"
                and client.get(failed).status == "failed"
            ),
            what="a suspended and a failed session",
        )
        Inbox(settings, db, broker).signal(approved, "approval", {"ok": True}, None, "test")
        wait_until(lambda: client.get(approved).status == "completed", what="the approval")
        yield f"http://127.0.0.1:{port}"
    finally:
        processes.stop_all()
        broker.close()
        db.close()


@pytest.fixture(scope="module")
def api_schema(api_server: str) -> Any:
    config = schemathesis.Config.from_dict(
        {
            "base-url": api_server,
            # Through the document's security scheme (not as a plain header), so
            # the ignored_auth check can send requests without it.
            "auth": {"openapi": {"bearer": {"bearer": API_TOKEN}}},
            "generation": {
                "max-examples": EXAMPLES_PER_OPERATION,
                "deterministic": True,
                "database": "none",
            },
            "checks": {"positive_data_acceptance": {"enabled": False}},
        }
    )
    # Loaded as a document, not from its URL: schemathesis leaves out the
    # operation a schema is loaded from, and GET /openapi.json is one to test.
    document = httpx.get(f"{api_server}/openapi.json", headers=AUTH, timeout=10).json()
    return schemathesis.openapi.from_dict(document, config=config)


@pytest.fixture(autouse=True)
def _node_id_for_schemathesis(request: pytest.FixtureRequest) -> None:
    """schemathesis 4.32 reads ``item._nodeid``, which pytest 9.2 no longer has
    (it keeps ``item.nodeid``); give it the attribute it reads."""
    if not hasattr(request.node, "_nodeid"):
        request.node._nodeid = request.node.nodeid


@pytest.fixture(scope="module")
def http() -> Iterator[requests.Session]:
    """One keep-alive session for every request, as schemathesis's own runner
    sends them (a ManagedCookiesSession: no cookie outlives its request, and
    redirects stay on the host). Without one, each request, and each check's
    extra request, opened and closed a connection of its own and read the
    proxy variables again: a fifth of the run. Nothing here goes through a
    proxy (127.0.0.1), so the environment's proxy settings are not read."""
    session = ManagedCookiesSession()
    session.trust_env = False
    yield session
    session.close()


schema = schemathesis.pytest.from_fixture("api_schema")


# Requests sent per operation, to prove every operation was exercised.
SENT: Counter[str] = Counter()


@schema.parametrize()
def test_every_operation_keeps_its_contract(case: Case, http: requests.Session) -> None:
    SENT[case.operation.definition.raw["operationId"]] += 1
    case.call_and_validate(session=http)


def test_linked_calls_keep_the_contract(api_schema: Any, http: requests.Session) -> None:
    """Scenarios that follow the document's links (and the ones schemathesis
    infers from responses): create -> get -> events -> signal -> cancel, list
    -> show -> retry... One hypothesis run per scenario, each with its own
    seed: within one run hypothesis replays earlier choices, and against a
    live server (sessions move on, a cancelled one stays cancelled) a replay
    takes another path, which it reports as flaky data generation."""
    answered: Counter[tuple[str, int]] = Counter()

    class Recorded(api_schema.as_state_machine()):  # type: ignore[misc]
        def get_call_kwargs(self, case: Case) -> dict[str, Any]:
            return {"session": http}

        def after_call(self, response: Any, case: Case) -> None:
            super().after_call(response, case)
            answered[case.operation.definition.raw["operationId"], response.status_code] += 1

    for number in range(STATEFUL_SCENARIOS):
        scenario: Any = hypothesis.seed(number)(type(f"Scenario{number}", (Recorded,), {}))
        scenario.run(
            settings=hypothesis.settings(
                max_examples=1,
                derandomize=False,  # the seed above picks each scenario
                stateful_step_count=STATEFUL_STEPS,
                deadline=None,
                database=None,
                phases=[hypothesis.Phase.generate],
                suppress_health_check=list(hypothesis.HealthCheck),
            )
        )
    # Links were followed to real sessions, not only random ids.
    assert answered["getSession", 200] + answered["listSessionEvents", 200] > 0, answered


def test_every_operation_was_exercised(api_schema: Any) -> None:
    operations = {
        result.ok().definition.raw["operationId"] for result in api_schema.get_all_operations()
    }
    assert len(operations) == 35
    assert set(SENT) == operations
    assert all(count >= 5 for count in SENT.values()), SENT


def test_the_fuzzed_api_created_sessions(api_server: str, urls: ServiceURLs) -> None:
    """The run reached past validation: sessions made from the examples exist."""
    db = Database(urls.database_url, pool_size=1)
    try:
        with db.connection() as conn:
            row = conn.execute("SELECT count(*) AS n FROM sessions").fetchone()
        assert row is not None
        assert int(str(row["n"])) > 3  # the deployment made 3
    finally:
        db.close()
