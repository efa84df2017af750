"""Every agent in examples/ unit-tested with resumable.testing: no servers, no
fake HTTP APIs, each test in milliseconds. (tests/integration runs the same
agents on real processes.)"""

from __future__ import annotations

import importlib
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from examples.fastapi_app import checkout
from examples.refund_agent import refund
from examples.research_agent import research
from examples.research_team import SOURCES, planner, researcher
from resumable import Agent, SessionStatus, Signal, Wait, Wake
from resumable.testing import TestSession, answers, run_step

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


# The examples built on openai, the OpenAI Agents SDK and PydanticAI are
# imported by the tests that run them, not when the module is collected: those
# libraries cost 3 s of CPU to import, and every xdist worker collects every
# module.
def _async_research() -> Agent:
    from examples.async_research_agent import async_research

    return async_research


def _openai_research() -> Agent:
    from examples.openai_agents_approval import openai_research

    return openai_research


def _pydantic_refunds() -> Agent:
    from examples.pydantic_ai_approval import pydantic_refunds

    return pydantic_refunds


def test_every_example_agent_is_unit_tested_here() -> None:
    tested = {
        refund,
        research,
        _async_research(),
        planner,
        researcher,
        checkout,
        _pydantic_refunds(),
        _openai_research(),
    }
    found = set()
    for path in sorted(EXAMPLES.glob("*.py")):
        module = importlib.import_module(f"examples.{path.stem}")
        found |= {value for value in vars(module).values() if isinstance(value, Agent)}
    assert {a.name for a in found} == {a.name for a in tested}


# -- the refund agent (resumable demo) ------------------------------------------------------

ORDER = {"order_id": "ord_1", "amount_cents": 4200}


class Payments:
    """The payment API: counts refunds by idempotency key."""

    def __init__(self) -> None:
        self.refunds: dict[str, dict[str, Any]] = {}

    def post_json(self, url: str, body: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
        refund = self.refunds.setdefault(idempotency_key, {"refund_id": f"re_{len(self.refunds)}"})
        return {**refund, "amount_cents": body["amount_cents"]}


def test_the_refund_agent_refunds_once_after_approval_and_waits_for_settlement() -> None:
    payments = Payments()
    session = TestSession(
        refund,
        {"order_id": "ord_1", "api": "https://shop.example", "settle_poll_seconds": 30},
        tools={"look_up_order": ORDER, "refund": payments.post_json},
        checks={"refund_settled": answers(None, None, {"status": "settled"})},
    )
    started = session.now
    session.run_until_wait()
    assert session.state["approval_url"] == session.callbacks[0].url
    session.deliver(session.state["approval_url"], {"approved": True, "by": "ops"})
    assert session.run_until_done() == {"refunded": True, "refund_id": "re_0", "settled": True}
    assert len(payments.refunds) == 1
    assert [c.tool for c in session.calls] == ["look_up_order", "refund"]
    assert session.now - started == timedelta(seconds=90)  # three checks, 30 s apart


def test_a_crash_after_the_refund_does_not_refund_twice() -> None:
    """The demo SIGKILLs the worker after the refund call and before the
    step's commit; the next worker reruns the step."""
    payments = Payments()
    approved = Wake("callback", "approval", {"approved": True, "by": "ops"})
    first = run_step(
        refund,
        "issue_refund",
        input={"order_id": "ord_1", "api": "https://shop.example"},
        state={"order": ORDER},
        wake=approved,
        seq=3,
        tools={"refund": payments.post_json},
    )
    again = first.rerun()
    assert len(payments.refunds) == 1 and again.calls[0].replayed
    assert again.state["refund"] == first.state["refund"]


def test_a_refund_that_is_not_approved_in_time_is_not_made() -> None:
    session = TestSession(refund, {"order_id": "ord_1", "api": "x"}, tools={"look_up_order": ORDER})
    assert session.run_until_done() == {"refunded": False}  # three days skipped
    assert session.state["decision"] == {"approved": False, "timed_out": True}
    assert [c.tool for c in session.calls] == ["look_up_order"]


# -- the research agent, sync and async -------------------------------------------------------

ASK_FOR_PAGE = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "fetch_url", "arguments": json.dumps({"url": "https://a.b"})},
        }
    ],
}
DRAFT = {"role": "assistant", "content": "Report: sources cited."}
REVISED = {"role": "assistant", "content": "Revised report."}
PAGE = {"url": "https://a.b", "status": 200, "text": "a page"}


def test_the_research_agent_loops_with_its_tool_and_a_reviewer() -> None:
    session = TestSession(
        research,
        {"question": "What is resumable?", "model": "fake"},
        tools={"llm": answers(ASK_FOR_PAGE, DRAFT, REVISED), "fetch_url": PAGE},
    )
    session.run_until_wait()
    assert session.state["draft"] == "Report: sources cited." and session.state["llm_calls"] == 2
    session.signal("approval", {"approved": False, "feedback": "cite it"})
    session.run_until_wait()
    assert session.state["conversation"][-2] == {"role": "user", "content": "Reviewer: cite it"}
    session.signal("approval", {"approved": True, "by": "alice"})
    assert session.run_until_done() == {
        "status": "approved",
        "report": "Revised report.",
        "approved_by": "alice",
        "llm_calls": 3,
    }
    roles = [m["role"] for m in session.calls[-1].args[1]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]


def test_the_research_agents_think_step_replays_its_llm_call_after_a_crash() -> None:
    state = {"model": "fake", "llm_calls": 0, "conversation": [{"role": "user", "content": "q"}]}
    first = run_step(
        research, "think", input={"question": "q"}, state=state, tools={"llm": DRAFT}, seq=2
    )
    again = first.rerun(tools={"llm": AssertionError("paid for twice")})
    assert again.state == first.state and again.next_step == "ask_approval"


def test_the_async_research_agent_awaits_its_tools() -> None:
    async def chat(model: str, messages: Any, tools: Any) -> dict[str, Any]:
        return ASK_FOR_PAGE if len(messages) == 2 else DRAFT

    async def fetch_url(url: str) -> dict[str, Any]:
        return PAGE

    session = TestSession(
        _async_research(),
        {"question": "q", "model": "fake", "approval_timeout": 60},
        tools={"llm": chat, "fetch_url": fetch_url},
    )
    session.run_until_wait()
    assert [c.tool for c in session.calls] == ["llm", "fetch_url", "llm"]
    assert session.run_until_done()["status"] == "expired"  # no one approved in a minute


# -- the research team ----------------------------------------------------------------------


def test_the_research_team_fans_out_searches_two_at_a_time_and_is_reviewed() -> None:
    topics = ["agents", "leases", "locks"]
    team = TestSession(planner, {"question": "Q?", "topics": topics}, agents=[researcher])
    team.run_until_wait()
    assert [c.input for c in team.children] == [{"topic": t} for t in topics]
    for child in team.children:
        assert child.run_next().wait is not None  # each asks for the search semaphore
    granted = [c.wake.payload["token"] for c in team.children if c.wake is not None]
    assert granted == [1, 2]  # at once; the third waits its turn
    assert team.children[2].status is SessionStatus.SUSPENDED
    with pytest.raises(AssertionError, match="waits for signal 'review'"):
        team.run_until_done()
    assert all(c.status is SessionStatus.COMPLETED for c in team.children)
    assert sorted(team.shared[SOURCES]) == topics
    assert all(f"- {t}: 2 sources" in team.state["report"] for t in topics)
    team.signal("review", {"approved": False, "feedback": "cite more"})
    team.run_until_wait()
    assert "(revised: cite more)" in team.state["report"]
    team.signal("review", {"approved": True, "by": "ada"})
    assert team.run_until_done()["approved_by"] == "ada"


def test_a_researcher_finds_a_cached_topic_and_searches_no_more() -> None:
    cached = run_step(researcher, "start", input={"topic": "a"}, shared={SOURCES: {"a": [{}]}})
    assert cached.result == {"topic": "a", "sources": 1} and cached.calls == []
    fresh = run_step(researcher, "start", input={"topic": "b"}, shared={SOURCES: {"a": [{}]}})
    assert fresh.wait is not None and fresh.next_step == "search_topic"


# -- the FastAPI shop's checkout ----------------------------------------------------------------


def test_the_checkout_waits_for_the_payment_providers_callback() -> None:
    paid = TestSession(checkout, {"order_id": "o-1", "amount": 500})
    paid.run_until_wait()
    paid.deliver("payment", {"paid": True})
    assert paid.run_until_done() == {"order_id": "o-1", "paid": True}
    unpaid = TestSession(checkout, {"order_id": "o-2", "amount": 500})
    assert unpaid.run_until_done() == {"order_id": "o-2", "paid": False}  # an hour skipped


# -- the framework agents: PydanticAI and the OpenAI Agents SDK ---------------------------------
# Each suspends on Signal("approval") for a day with the call it may not make
# alone in state["pending"]; a signal decides it and the run goes on.

APPROVAL_WAIT = Wait((Signal("approval"),), then="decide", timeout=86400)
NO_RECEIPT = "Refunds over 20 EUR need a receipt."


def test_the_pydantic_ai_refund_is_rejected_with_a_reason_the_model_reads() -> None:
    """The example's own scripted FunctionModel answers the model requests (no
    network); the refund tool is the effect, counted."""
    refunds: list[tuple[dict[str, Any], str]] = []

    def payment_api(request: dict[str, Any], idempotency_key: str) -> str:
        refunds.append((request, idempotency_key))
        return "refunded"

    session = TestSession(
        _pydantic_refunds(),
        {"prompt": "Refund order o-17", "deps": {"currency": "EUR"}},
        tools={"tool:refund": payment_api},
    )
    assert session.run_until_wait() == APPROVAL_WAIT
    assert (session.status, session.wait) == (SessionStatus.SUSPENDED, APPROVAL_WAIT)
    [pending] = session.state["pending"]
    assert pending == {
        "id": pending["id"],
        "tool": "refund",
        "args": {"order": "o-17", "amount": 30},
        "kind": "approval",
    }
    assert [c.tool for c in session.calls] == ["model_request"] and refunds == []

    session.signal("approval", {"approved": False, "reason": NO_RECEIPT})
    assert session.run_until_done() == f"Refund outcome: {NO_RECEIPT}"
    assert session.status is SessionStatus.COMPLETED
    assert refunds == []  # rejected: the refund was never made
    assert [c.tool for c in session.calls] == ["model_request", "model_request"]
    denied = [
        part
        for message in session.state["messages"]
        for part in message["parts"]
        if part["part_kind"] == "tool-return"
    ]
    assert [(d["tool_call_id"], d["content"]) for d in denied] == [(pending["id"], NO_RECEIPT)]


def _model_response(*output: dict[str, Any]) -> dict[str, Any]:
    """A recorded ``model_request`` answer of the OpenAI Agents integration:
    Responses-format output items, usage, response id."""
    return {"output": list(output), "usage": [1, 10, 5, 15], "response_id": None}


SOURCE = "https://example.com/durable-agents"
ASK_TO_FETCH = _model_response(
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "fetch_url",
        "arguments": json.dumps({"url": SOURCE}),
        "status": "completed",
    }
)
REPORT = "Durable agents replay recorded calls after a crash [1]."
WRITE_REPORT = _model_response(
    {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": REPORT, "annotations": []}],
    }
)


def test_the_openai_agents_fetch_runs_once_after_approval(monkeypatch: pytest.MonkeyPatch) -> None:
    """The two model requests are answered by stubs (recorded responses), the
    fetch by a counted stub: nothing is sent. The example's model provider
    still builds its client, so it gets a key and an address nothing listens on."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-unused")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    fetches: list[tuple[dict[str, Any], str]] = []

    def fetch_url(request: dict[str, Any], idempotency_key: str) -> str:
        fetches.append((request, idempotency_key))
        return "Each step commits; a crashed step replays its recorded calls."

    session = TestSession(
        _openai_research(),
        {"prompt": "How do durable agents survive crashes?"},
        tools={"model_request": answers(ASK_TO_FETCH, WRITE_REPORT), "tool:fetch_url": fetch_url},
    )
    assert session.run_until_wait() == APPROVAL_WAIT
    assert (session.status, session.wait) == (SessionStatus.SUSPENDED, APPROVAL_WAIT)
    assert session.state["pending"] == [
        {"id": "call_1", "tool": "fetch_url", "args": {"url": SOURCE}, "kind": "approval"}
    ]
    assert "run_state" in session.state and fetches == []  # nothing fetched before approval

    session.signal("approval", {"approved": True})
    assert session.run_until_done() == REPORT
    assert session.status is SessionStatus.COMPLETED
    assert [c.tool for c in session.calls] == ["model_request", "tool:fetch_url", "model_request"]
    assert fetches == [({"call_id": "call_1", "args": {"url": SOURCE}}, session.calls[1].key)]
    fed_back = [i for i in session.state["input"] if i.get("type") == "function_call_output"]
    assert [(i["call_id"], i["output"]) for i in fed_back] == [
        ("call_1", "Each step commits; a crashed step replays its recorded calls.")
    ]
