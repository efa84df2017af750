"""resumable.testing, one step at a time: keys, replays, stubs, async steps and
the checks a worker makes, in milliseconds and without servers."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from resumable import (
    Agent,
    Complete,
    EventSourced,
    Next,
    Signal,
    StepContext,
    Wait,
    Wake,
)
from resumable.context import idempotency_key, tool_request
from resumable.coordination.children import child_id
from resumable.coordination.shared import CoordinationError, SharedUpdateError
from resumable.errors import (
    AgentDefinitionError,
    InvalidArgumentError,
    InvalidStepResultError,
    NotSerializableError,
    ReplayDivergedError,
    TransientError,
    UnknownCheckError,
    UnknownStepError,
    WaitDefinitionError,
)
from resumable.queue import tool_calls
from resumable.testing import StepResult, TestSession, answers, run_step
from resumable.waits import Poll

SESSION = uuid.UUID("00000000-0000-4000-8000-000000000001")

shop = Agent("kit_shop", version=2, patches={"euros": 2})


class Card:
    """A fake payment API that counts its charges."""

    def __init__(self) -> None:
        self.keys: list[str] = []

    def charge(self, amount: int, currency: str = "usd", *, idempotency_key: str) -> dict[str, Any]:
        self.keys.append(idempotency_key)
        return {"id": f"ch_{len(self.keys)}", "amount": amount, "currency": currency}


def real_charge(amount: int, currency: str = "usd", *, idempotency_key: str) -> dict[str, Any]:
    raise AssertionError("the real payment API is never called by these tests")


@shop.step
def charge(ctx: StepContext) -> str:
    currency = "eur" if ctx.patched("euros") else "usd"
    ctx.state["receipt"] = ctx.tool("charge", real_charge, ctx.input["amount"], currency=currency)
    return "ship"


@shop.step
def ship(ctx: StepContext) -> Wait:
    return ctx.wait(Signal("delivered"), then="done", timeout=86400)


@shop.step
def done(ctx: StepContext) -> Complete:
    return Complete({"delivered": ctx.wake is not None and ctx.wake.kind == "signal"})


def test_a_step_runs_with_the_key_a_worker_would_give_its_call() -> None:
    card = Card()
    result = run_step(
        shop, "charge", input={"amount": 500}, tools={"charge": card.charge}, session_id=SESSION
    )
    assert result.outcome == Next("ship") and result.next_step == "ship"
    assert not result.completed and result.wait is None
    assert result.state == {"receipt": {"id": "ch_1", "amount": 500, "currency": "eur"}}
    [call] = result.calls
    expected = idempotency_key(
        SESSION, 1, "charge", 0, "charge", tool_request("charge", (500,), {"currency": "eur"})
    )
    assert call.key == expected == card.keys[0]
    assert (call.tool, call.args, call.kwargs, call.seq, call.index) == (
        "charge", (500,), {"currency": "eur"}, 1, 0,
    )  # fmt: skip
    assert not call.replayed and call.result["id"] == "ch_1"
    # The worker derives keys with the very same function.
    assert tool_calls.idempotency_key is idempotency_key


def test_the_step_ran_twice_the_card_was_charged_once() -> None:
    card = Card()
    first = run_step(shop, "charge", input={"amount": 500}, tools={"charge": card.charge})
    again = first.rerun(tools={"charge": AssertionError("charged twice")})
    assert len(card.keys) == 1
    assert again.calls[0].replayed and again.calls[0].key == first.calls[0].key
    assert again.state == first.state and again.outcome == first.outcome


def test_a_replay_returns_the_recorded_copy_with_secrets_redacted() -> None:
    agent = Agent("kit_login")

    @agent.step
    def login(ctx: StepContext) -> Complete:
        answer = ctx.tool("login", lambda user: {"user": user, "token": "s3cr3t-value"}, "ann")
        return Complete(answer)

    first = run_step(agent, "login")
    assert first.result == {"user": "ann", "token": "s3cr3t-value"}
    # A worker recovering the step gets what the record holds, as here.
    assert first.rerun().result == {"user": "ann", "token": "[REDACTED]"}
    assert run_step(agent, "login", redact_keys=()).rerun().result["token"] == "s3cr3t-value"


def test_other_arguments_or_fewer_calls_on_a_rerun_diverge() -> None:
    agent = Agent("kit_fickle")
    amounts = iter([1, 2])
    calls = iter([2, 1])

    @agent.step
    def pay(ctx: StepContext) -> Complete:
        ctx.tool("pay", lambda n: n, next(amounts))
        return Complete()

    @agent.step
    def several(ctx: StepContext) -> Complete:
        for n in range(next(calls)):
            ctx.tool("note", lambda n: n, n)
        return Complete()

    # The message names what changed (the first positional argument), not the tool twice.
    with pytest.raises(
        ReplayDivergedError,
        match=r"call #0 of tool 'pay' asks for other arguments than recorded "
        r"\(changed: args\[0\]\)",
    ):
        run_step(agent, "pay").rerun()
    with pytest.raises(ReplayDivergedError, match=r"made 1 call\(s\) on replay, but 1 more"):
        run_step(agent, "several").rerun()


def test_stubs_return_values_raise_exceptions_or_give_answers_in_turn() -> None:
    agent = Agent("kit_stubs")

    @agent.step
    def ask(ctx: StepContext) -> Complete:
        return Complete([ctx.tool("llm", real_charge, n) for n in range(2)])

    assert run_step(agent, "ask", tools={"llm": {"ok": True}}).result == [{"ok": True}] * 2
    assert run_step(agent, "ask", tools={"llm": answers("a", "b")}).result == ["a", "b"]
    with pytest.raises(TransientError, match="busy"):
        run_step(agent, "ask", tools={"llm": TransientError("busy")})
    with pytest.raises(TimeoutError):
        run_step(agent, "ask", tools={"llm": TimeoutError})
    with pytest.raises(AssertionError, match="more often than the 1 answers"):
        run_step(agent, "ask", tools={"llm": answers("only one")})
    failed = answers(RuntimeError("first"), "second")
    with pytest.raises(RuntimeError, match="first"):
        run_step(agent, "ask", tools={"llm": failed})


def test_a_failed_call_is_made_again_under_the_same_key() -> None:
    session = TestSession(
        shop, {"amount": 5}, tools={"charge": answers(TransientError("429"), {"id": "ch"})}
    )
    session.run_until_wait()
    made, again = session.calls
    assert made.error is not None and made.key == again.key and again.result == {"id": "ch"}
    assert session.failures == [made.error] and session.history[0].seq == 1


def test_ctx_patched_follows_the_version_the_session_started_on() -> None:
    stubs = {"charge": Card().charge}
    assert run_step(shop, "charge", input={"amount": 1}, tools=stubs, version=1).calls[
        0
    ].kwargs == {"currency": "usd"}
    assert run_step(shop, "charge", input={"amount": 1}, tools=stubs).calls[0].kwargs == {
        "currency": "eur"
    }


# -- async steps -------------------------------------------------------------------------

trip = Agent("kit_trip")


async def book(what: str, idempotency_key: str) -> dict[str, str]:
    await asyncio.sleep(0)
    return {"booked": what, "key": idempotency_key}


@trip.step
async def plan(ctx: StepContext) -> Complete:
    hotel, flight = await asyncio.gather(
        ctx.tool("book", book, "hotel"), ctx.tool("book", book, "flight")
    )
    note = ctx.tool("note", lambda text: text.upper(), "sync tools run inline")
    return Complete({"hotel": hotel["booked"], "flight": flight["booked"], "note": note})


@trip.step
def forgot_async(ctx: StepContext) -> Any:
    if ctx.input.get("tool"):
        return ctx.tool("book", book, "x")
    return plan(ctx)  # a coroutine returned by a sync step


def test_an_async_step_awaits_its_tools_and_gathered_calls_keep_their_positions() -> None:
    result = run_step(trip, "plan")
    assert result.result == {"hotel": "hotel", "flight": "flight", "note": "SYNC TOOLS RUN INLINE"}
    assert [(c.tool, c.index, c.args) for c in result.calls] == [
        ("book", 0, ("hotel",)), ("book", 1, ("flight",)), ("note", 2, ("sync tools run inline",)),
    ]  # fmt: skip
    again = result.rerun(tools={"book": AssertionError("booked twice")})
    assert again.result == result.result and all(c.replayed for c in again.calls)
    stubbed = run_step(trip, "plan", tools={"book": answers({"booked": "H"}, {"booked": "F"})})
    assert stubbed.result["hotel"] == "H"


def test_async_mistakes_get_the_workers_clear_errors() -> None:
    with pytest.raises(InvalidStepResultError, match="returned a coroutine"):
        run_step(trip, "forgot_async", input={})
    with pytest.raises(AgentDefinitionError, match="declare the step `async def`"):
        run_step(trip, "forgot_async", input={"tool": True})

    async def charged(amount: int, currency: str) -> dict[str, Any]:
        return {}

    with pytest.raises(InvalidArgumentError, match="stub of tool 'charge' is async"):
        run_step(shop, "charge", input={"amount": 1}, tools={"charge": charged})


def test_inside_a_running_event_loop_the_kit_says_to_use_a_sync_test() -> None:
    async def inside() -> StepResult:
        return run_step(trip, "plan")

    with pytest.raises(RuntimeError, match="call it from a sync test function"):
        asyncio.run(inside())


# -- what a worker refuses, refused here --------------------------------------------------

mistakes = Agent("kit_mistakes")


@mistakes.step
def misstep(ctx: StepContext) -> Any:
    how = ctx.input
    if how == "list_state":
        ctx.state = [1]  # type: ignore[assignment]
    elif how == "object_in_state":
        ctx.state["when"] = object()
    elif how == "unknown_next":
        return "nowhere"
    elif how == "wrong_type":
        return 42
    elif how == "tuple_result":
        return Complete({"pair": (1, 2)})
    elif how == "set_result":
        return Complete({1, 2})
    elif how == "set_argument":
        ctx.tool("t", lambda s: None, {1})
    elif how == "set_tool_result":
        ctx.tool("t", lambda: {1})
    elif how == "unknown_compensation":
        ctx.tool("t", lambda: None, compensate="undo")
    elif how == "compensated_answer":
        ctx.tool("t", lambda: None, compensate="undo", side_effects=False)
    elif how == "side_effects_not_bool":
        ctx.tool("t", lambda: None, side_effects="no")  # type: ignore[call-overload]
    elif how == "defer_record_not_bool":
        ctx.tool("t", lambda: None, defer_record=None)  # type: ignore[call-overload]
    elif how == "unknown_check":
        return ctx.wait(Poll("nope", every=1), then="misstep")
    elif how == "two_polls":
        return ctx.wait(Poll("a"), Poll("b"), then="misstep")
    elif how == "unknown_then":
        return ctx.wait(Signal("x"), then="nowhere")
    elif how == "not_event_sourced":
        ctx.emit({"e": 1})
    return Complete()


@pytest.mark.parametrize(
    ("how", "error", "message"),
    [
        ("list_state", NotSerializableError, "state must be a JSON object"),
        ("object_in_state", NotSerializableError, r"state\.when \(object\)"),
        ("unknown_next", UnknownStepError, "no step 'nowhere'"),
        ("wrong_type", InvalidStepResultError, "got int"),
        ("set_result", NotSerializableError, r"result is not JSON-serializable at result \(set\)"),
        ("set_argument", NotSerializableError, "tool 't' arguments"),
        ("set_tool_result", NotSerializableError, "result of tool 't'"),
        ("unknown_compensation", AgentDefinitionError, "has no compensation 'undo'"),
        (
            "compensated_answer",
            AgentDefinitionError,
            "has no side effects .* nothing to compensate",
        ),
        ("side_effects_not_bool", AgentDefinitionError, "side_effects must be True or False"),
        ("defer_record_not_bool", AgentDefinitionError, "defer_record must be True or False"),
        ("unknown_check", UnknownCheckError, "has no check 'nope'"),
        ("two_polls", WaitDefinitionError, "at most one Poll"),
        ("unknown_then", UnknownStepError, "no step 'nowhere'"),
        ("not_event_sourced", AgentDefinitionError, "is not event-sourced"),
    ],
)
def test_what_a_worker_refuses_is_refused_with_its_message(
    how: str, error: type[BaseException], message: str
) -> None:
    with pytest.raises(error, match=message):
        run_step(mistakes, "misstep", input=how)


def test_values_come_back_as_the_database_gives_them() -> None:
    assert run_step(mistakes, "misstep", input="tuple_result").result == {"pair": [1, 2]}
    with pytest.raises(UnknownStepError, match="no step 'absent'"):
        run_step(mistakes, "absent")
    with pytest.raises(InvalidArgumentError, match="seq is a step's number"):
        run_step(mistakes, "misstep", seq=0)
    with pytest.raises(NotSerializableError, match="state must be a JSON object"):
        run_step(mistakes, "misstep", state=[1])  # type: ignore[arg-type]


# -- waits, callbacks, coordination, events -----------------------------------------------

desk = Agent("kit_desk")


@desk.step
def ask(ctx: StepContext) -> Wait:
    approval = ctx.callback("approval")
    ctx.state["url"] = approval.url
    return ctx.wait(approval, Signal("cancel"), then="answered", timeout=3600)


@desk.step
def answered(ctx: StepContext) -> Complete:
    assert ctx.wake is not None
    return Complete({"kind": ctx.wake.kind, "topic": ctx.wake.topic, "payload": ctx.wake.payload})


def test_a_wait_and_the_wake_its_next_step_sees() -> None:
    asked = run_step(desk, "ask")
    assert asked.wait is not None and asked.next_step == "answered"
    [callback] = asked.callbacks
    assert asked.state["url"] == callback.url and callback.url.endswith(callback.token)
    assert asked.rerun().callbacks == [callback]  # a replay finds the same token
    woken = run_step(desk, "answered", wake=Wake("signal", "cancel", {"why": "dup"}), seq=2)
    assert woken.result == {"kind": "signal", "topic": "cancel", "payload": {"why": "dup"}}
    assert woken.completed and woken.next_step is None and woken.wake is not None


vault = Agent("kit_vault")


def write(value: str, *, fencing_token: int, idempotency_key: str) -> dict[str, Any]:
    return {"value": value, "fence": fencing_token}


@vault.step
def guarded(ctx: StepContext) -> Any:
    ctx.state["token"] = ctx.fence("vault")
    ctx.state["write"] = ctx.tool("write", write, "v", fence="vault")
    ctx.state["seen"] = ctx.update_shared("visits", lambda n: (n or 0) + 1)
    ctx.state["read"] = ctx.shared("visits")
    ctx.release("vault")
    kid = ctx.spawn("kit_child", {"n": 1})
    return ctx.lock("archive", then="guarded") if ctx.input else Complete(str(kid))


def test_locks_shared_documents_and_children_as_a_step_sees_them() -> None:
    result = run_step(
        vault, "guarded", locks={"vault": 7}, shared={"visits": 41}, session_id=SESSION
    )
    assert result.state == {"token": 7, "write": {"value": "v", "fence": 7}, "seen": 42, "read": 42}
    [call] = result.calls
    assert call.fencing_token == 7 and call.kwargs == {}  # not part of the call's identity
    assert call.key == idempotency_key(
        SESSION, 1, "guarded", 0, "write", tool_request("write", ("v",), {})
    )
    assert result.shared_updates == {"visits": 42} and result.released == ["vault"]
    [child] = result.spawned
    assert (child.session_id, child.agent, child.input) == (
        child_id(SESSION, 1, 0),
        "kit_child",
        {"n": 1},
    )
    assert result.result == str(child.session_id)
    # A rerun is a new run of the holder: a new, larger token; the write is replayed.
    again = result.rerun()
    assert again.state["token"] == 8 and again.state["write"] == {"value": "v", "fence": 7}
    # Asking for "archive" after releasing "vault" keeps the ascending order.
    assert run_step(vault, "guarded", input=True, locks={"vault": 7}).wait is not None


def test_coordination_mistakes_fail_the_step_as_its_commit_would() -> None:
    with pytest.raises(CoordinationError, match="does not hold lock 'vault'"):
        run_step(vault, "guarded")
    agent = Agent("kit_order")

    @agent.step
    def backwards(ctx: StepContext) -> Wait:
        return ctx.lock("a", then="backwards")

    @agent.step
    def give_back(ctx: StepContext) -> Complete:
        ctx.release("never-held")
        return Complete()

    @agent.step
    def impure(ctx: StepContext) -> Complete:
        calls = iter([1])
        ctx.update_shared("doc", lambda value: next(calls))  # fails when applied again
        return Complete()

    with pytest.raises(CoordinationError, match="cannot acquire lock 'a' while holding 'b'"):
        run_step(agent, "backwards", locks={"b": 1})
    with pytest.raises(CoordinationError, match="does not hold lock 'never-held'"):
        run_step(agent, "give_back")
    with pytest.raises(SharedUpdateError, match="updating shared document 'doc' at commit"):
        run_step(agent, "impure")


def _count(state: dict[str, Any], event: Any) -> dict[str, Any]:
    return {**state, "total": state.get("total", 0) + event["n"]}


ledger = Agent("kit_ledger", checkpoints=EventSourced(_count))


@ledger.step
def add(ctx: StepContext) -> Complete:
    ctx.emit({"n": 2})
    ctx.emit({"n": 3})
    return Complete(ctx.state["total"])


def test_an_event_sourced_step_emits_and_its_state_is_the_reducer_folded() -> None:
    result = run_step(ledger, "add", state={"total": 10})
    assert result.events == [{"n": 2}, {"n": 3}] and result.state == {"total": 15}
    assert result.result == 15
    unstorable = Agent("kit_ledger_unstorable", checkpoints=EventSourced(_count))

    @unstorable.step
    def emit_a_set(ctx: StepContext) -> Complete:
        ctx.emit({"n": {1}})
        return Complete()

    with pytest.raises(NotSerializableError, match=r"event is not JSON-serializable"):
        run_step(unstorable, "emit_a_set")


def test_a_step_result_from_a_session_does_not_rerun_and_the_kit_is_not_a_pytest_class() -> None:
    session = TestSession(shop, {"amount": 1}, tools={"charge": {"id": "x"}})
    session.run_until_wait()
    with pytest.raises(InvalidArgumentError, match="only a step run by run_step"):
        session.history[0].rerun()
    assert TestSession.__test__ is False


def test_the_kit_imports_no_process() -> None:
    """It is part of the agent API: a test of a step needs no worker code."""
    code = (
        "import sys, resumable.testing; "
        "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('resumable.')}))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    for process in ("queue", "webhooks", "scheduler", "cli", "dev", "demo"):
        assert f"'{process}'" not in loaded, loaded


def test_the_quick_example_of_the_testing_page_runs() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "testing.md").read_text()
    agent, tests = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)[:2]
    namespace: dict[str, Any] = {}
    exec(compile(agent + tests, "docs/testing.md", "exec"), namespace)
    found = [fn for name, fn in namespace.items() if name.startswith("test_")]
    assert len(found) == 3
    for test in found:
        test()
