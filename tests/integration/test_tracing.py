"""OpenTelemetry across real web, worker and scheduler processes, exported
over OTLP/HTTP to a real receiver in the test: the demo's story (start → tool
→ callback wait → resume → SIGKILL of the worker mid-step → recovery →
complete) is one trace, continuing the caller's ``traceparent``."""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path

import httpx

from resumable.client import Client
from resumable.settings import Settings
from tests.conftest import API_TOKEN, LocalDeployment, run_cli, wait_until
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan, span_tree
from tests.signing import signed_headers

_TRACED = "tests.traced_agents"


def _otel_env(receiver: OtlpReceiver) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }


def _one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    [span] = [s for s in spans if s.name == name]
    return span


def test_a_session_that_waits_and_survives_a_sigkill_is_one_trace(
    client: Client, tmp_path: Path, deployment: LocalDeployment
) -> None:
    with OtlpReceiver() as receiver:
        env = _otel_env(receiver)
        deployment.web(**env)
        deployment.scheduler(**env)
        victim = deployment.worker(_TRACED, **env)

        # The caller's own span: the session's trace continues it.
        trace_id, caller_span = secrets.token_hex(16), secrets.token_hex(8)
        answer = httpx.post(
            f"{deployment.url}/v1/sessions",
            json={"agent": "traced", "input": {"order": "A-1", "gate_dir": str(tmp_path)}},
            headers={
                "authorization": f"Bearer {API_TOKEN}",
                "traceparent": f"00-{trace_id}-{caller_span}-01",
            },
        )
        assert answer.status_code == 201, answer.text
        session_id = answer.json()["session_id"]
        wait_until(lambda: client.get(session_id).status == "suspended", what="the wait")
        wait_until(lambda: receiver.named("resumable.step plan"), what="the plan step's span")

        (tmp_path / "hold").touch()
        url = client.state(session_id)["callback_url"]
        body = json.dumps({"approved": True})
        callback = httpx.post(url, content=body, headers=signed_headers(body))
        assert callback.status_code == 202, callback.text
        wait_until((tmp_path / "entered-work-2").exists, what="the work step to start")
        # The second worker starts while the victim is alive, so it finds the
        # agent served and enqueues nothing at start: the scheduler's
        # reconciler is what brings the session back after the kill.
        deployment.worker(_TRACED, **env)
        deployment.kill(victim)  # SIGKILL mid-step: its open spans are never exported
        (tmp_path / "hold").unlink()
        wait_until(
            lambda: client.get(session_id).status == "completed", timeout=60, what="recovery"
        )
        wait_until(lambda: receiver.named("resumable.resume"), what="the resume span")
        wait_until(lambda: receiver.named("resumable.recover"), what="the reconciler's span")
        spans = [s for s in receiver.spans() if s.trace_id == trace_id]

    tree = span_tree(spans, caller_span)
    print(f"\nspan tree of session {session_id} (trace {trace_id}):\n{tree}")
    assert all(s.trace_id == trace_id for s in receiver.spans()), tree
    _assert_the_story(spans, session_id, caller_span, tree)


def _assert_the_story(
    spans: list[ReceivedSpan], session_id: str, caller_span: str, tree: str
) -> None:
    # Every span of the session is in the caller's trace, under the start span.
    start = _one(spans, "resumable.session.start")
    assert (start.parent_id, start.service) == (caller_span, "resumable-web")
    assert start.attributes["resumable.session.id"] == session_id
    assert start.attributes["resumable.agent"] == "traced"
    under_start = {s.name for s in spans if s.parent_id == start.span_id}
    assert under_start >= {
        "resumable.run",
        "resumable.callback received",
        "resumable.recover",
        "resumable.resume",
    }, tree

    # The first run: the plan step and its tool call, nested, in the worker.
    run = _one(spans, "resumable.run")
    plan = _one(spans, "resumable.step plan")
    tool = _one(spans, "resumable.tool look_up")
    assert run.service == "resumable-worker" and plan.parent_id == run.span_id
    assert tool.parent_id == plan.span_id
    assert plan.attributes["resumable.attempt"] == 1
    assert plan.attributes["resumable.epoch"] == run.attributes["resumable.epoch"]
    assert tool.attributes["resumable.tool.idempotency_key"].startswith("rsm_")

    received = _one(spans, "resumable.callback received")
    assert received.service == "resumable-web"
    assert received.attributes["resumable.delivery.verdict"] == "accepted"

    # The killed worker's resume never ended, so never arrived: the one resume
    # received is the recovery's, under a later epoch, woken by the callback.
    [resume] = [s for s in spans if s.name == "resumable.resume"]
    work = _one(spans, "resumable.step work")
    assert work.parent_id == resume.span_id
    assert resume.attributes["resumable.wake.kind"] == "callback"
    assert work.attributes["resumable.wake.kind"] == "callback"
    assert resume.attributes["resumable.epoch"] > run.attributes["resumable.epoch"] + 1
    recover = _one(spans, "resumable.recover")
    assert recover.service == "resumable-scheduler"
    assert recover.attributes["resumable.recover.reason"] in ("expired", "orphaned")
    assert recover.start_ns < resume.start_ns


def test_a_command_that_exits_gives_an_unreachable_collector_two_seconds(
    client: Client, settings: Settings
) -> None:
    """A one-shot command exports its spans as it exits; the exporter retried
    a collector that refuses connections for its whole 10 s timeout, so
    `resumable enqueue` took 9 s (measured) instead of 1.5 s."""
    began = time.monotonic()
    done = run_cli(
        settings,
        "enqueue",
        "five",
        "--agents",
        "tests.agents",
        timeout=60,
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:1",
    )
    elapsed = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    assert client.get(done.stdout.strip()).agent == "five"
    assert elapsed < 7.0, (elapsed, done.stderr)
