"""resumable.testing's TestSession: whole sessions in memory, with signals,
callbacks, skipped time, polls, locks, children, retries and sagas."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from resumable import (
    Agent,
    Children,
    Complete,
    PermanentError,
    RetryPolicy,
    SessionStatus,
    Signal,
    StepContext,
    Timer,
    TransientError,
    Wait,
)
from resumable.errors import InvalidArgumentError, SessionStateError
from resumable.models.status import SagaOutcome
from resumable.testing import TestSession, answers
from resumable.waits import Poll

START = datetime(2030, 1, 1, tzinfo=UTC)

# -- signals, callbacks, timers and polls ---------------------------------------------------

support = Agent("kit_support")


@support.step
def triage(ctx: StepContext) -> Wait:
    approval = ctx.callback("approval", timeout=7200)
    ctx.state["approval_url"] = approval.url
    return ctx.wait(approval, Signal("escalate"), then="decide", timeout=86400)


@support.step
def decide(ctx: StepContext) -> Any:
    assert ctx.wake is not None
    ctx.state["woken_by"] = [ctx.wake.kind, ctx.wake.topic, ctx.wake.payload]
    if ctx.wake.kind == "timeout":
        return ctx.sleep(60, then="decide")
    return Complete(ctx.state["woken_by"])


def test_a_signal_wakes_the_wait_once_and_is_consumed() -> None:
    session = TestSession(support, {}, now=START)
    wait = session.run_until_wait()
    assert wait.then == "decide" and session.status.value == "suspended"
    assert session.step == "decide" and session.seq == 1
    session.signal("escalate", {"by": "ann"})
    assert session.status.value == "pending"
    assert session.run_until_done() == ["signal", "escalate", {"by": "ann"}]
    assert session.now == START  # no time went by
    with pytest.raises(SessionStateError, match="has finished"):
        session.signal("escalate")


def test_a_callback_is_delivered_by_url_token_topic_or_object_and_closes_with_the_wait() -> None:
    for pick in ("url", "token", "topic", "callback"):
        session = TestSession(support, {})
        session.run_until_wait()
        [callback] = session.callbacks
        target = {
            "url": session.state["approval_url"],
            "token": callback.token,
            "topic": "approval",
            "callback": callback,
        }[pick]
        session.deliver(target, {"ok": pick})
        assert session.run_until_done() == ["callback", "approval", {"ok": pick}]
        with pytest.raises(SessionStateError, match="is closed"):
            session.deliver(callback, {})
    with pytest.raises(InvalidArgumentError, match=r"no callback 'nope'.*'approval'"):
        session.deliver("nope")


def test_a_signal_sent_before_the_wait_is_kept_and_other_topics_stay_pending() -> None:
    session = TestSession(support, {})
    session.signal("unrelated", 1)
    session.signal("escalate", 2)
    assert session.run_until_done() == ["signal", "escalate", 2]
    assert len(session._deliveries) == 1  # "unrelated" still waits for a wait naming it


def test_time_is_skipped_never_slept_and_the_earliest_deadline_wins() -> None:
    session = TestSession(support, {}, now=START)
    session.run_until_wait()
    session.advance(3600)
    assert session.status is SessionStatus.SUSPENDED and session.now == START + timedelta(hours=1)
    session.advance()  # to the callback's own timeout, the earliest
    assert session.now == START + timedelta(hours=2)
    assert session.wake is not None and session.wake.timed_out
    session.run_until_wait()  # the step slept for a minute
    assert session.history[-1].wait is not None
    session.advance(timedelta(seconds=60))
    assert session.run_until_done() == ["timer", None, None]
    assert session.now == START + timedelta(hours=2, minutes=1)


def test_run_until_done_says_what_the_session_waits_for_when_only_the_test_can_deliver() -> None:
    agent = Agent("kit_patient")
    agent.step(lambda ctx: ctx.wait(Signal("go"), then="end"), name="begin")
    agent.step(lambda ctx: Complete(), name="end")
    session = TestSession(agent)
    with pytest.raises(AssertionError, match=r"waits for signal 'go' \(session.signal\)"):
        session.run_until_done()
    with pytest.raises(AssertionError, match="nothing here waits for time"):
        session.advance()
    with pytest.raises(AssertionError, match="finished instead of waiting"):
        session.signal("go")
        session.run_until_wait()


settle = Agent("kit_settle")


@settle.step
def pay(ctx: StepContext) -> Wait:
    return ctx.wait(Poll("settled", {"id": "r1"}, every=60), Timer(seconds=600), then="paid")


@settle.check
def settled(args: dict[str, Any]) -> dict[str, Any] | None:
    raise AssertionError("the real check calls the payment API")


@settle.step
def paid(ctx: StepContext) -> Complete:
    assert ctx.wake is not None
    return Complete([ctx.wake.kind, ctx.wake.payload])


def test_a_poll_check_runs_every_interval_until_it_answers() -> None:
    seen: list[dict[str, Any]] = []

    def check(args: dict[str, Any]) -> Any:
        seen.append(args)
        return {"status": "settled"} if len(seen) == 3 else None

    session = TestSession(settle, now=START, checks={"settled": check})
    assert session.run_until_done() == ["poll", {"status": "settled"}]
    assert seen == [{"id": "r1"}] * 3 and session.now == START + timedelta(minutes=3)
    never = TestSession(settle, now=START, checks={"settled": None})
    assert never.run_until_done() == ["timer", None]  # the timer came first
    assert never.now == START + timedelta(minutes=10)


def test_an_async_check_is_awaited() -> None:
    async def check(args: dict[str, Any]) -> str:
        return "done"

    assert TestSession(settle, checks={"settled": check}).run_until_done() == ["poll", "done"]


def test_a_loop_is_stopped_by_max_steps() -> None:
    agent = Agent("kit_forever")
    agent.step(lambda ctx: "spin", name="spin")
    with pytest.raises(AssertionError, match="50 steps and wake-ups"):
        TestSession(agent, max_steps=50).run_until_done()


# -- retries and sagas ----------------------------------------------------------------------

travel = Agent("kit_travel", retry=RetryPolicy(max_attempts=3, min_delay=1, max_delay=10))


@travel.step
def book_trip(ctx: StepContext) -> Complete:
    hotel = ctx.tool("hotel", lambda city: {"id": "h1"}, "paris", compensate="cancel_hotel")
    flight = ctx.tool("flight", lambda city: {"id": "f1"}, "paris", compensate="cancel_flight")
    ctx.tool("pay", lambda amount: {"ok": True}, 100)
    return Complete({"hotel": hotel["id"], "flight": flight["id"]})


@travel.compensation
def cancel_hotel(request: dict[str, Any], response: dict[str, Any], idempotency_key: str) -> None:
    raise AssertionError("stubbed in the tests")


@travel.compensation
def cancel_flight(request: dict[str, Any], response: dict[str, Any]) -> None:
    raise AssertionError("stubbed in the tests")


def test_a_transient_failure_is_retried_after_its_delay_with_the_calls_replayed() -> None:
    hotels: list[str] = []

    def hotel(city: str, idempotency_key: str) -> dict[str, str]:
        hotels.append(idempotency_key)
        return {"id": "h"}

    session = TestSession(
        travel,
        now=START,
        tools={
            "hotel": hotel,
            "pay": answers(TransientError("gateway down"), TransientError("again"), {"ok": 1}),
        },
    )
    assert session.run_until_done() == {"hotel": "h", "flight": "f1"}
    assert len(hotels) == 1 and len(session.failures) == 2
    assert session.now == START + timedelta(seconds=1 + 2)  # the policy's delays, skipped
    assert [c.tool for c in session.calls if c.replayed] == ["hotel", "flight"] * 2


def test_a_permanent_failure_runs_the_saga_newest_first_and_raises() -> None:
    undone: list[tuple[str, Any, Any, Any]] = []

    def undo(name: str) -> Any:
        def compensate(request: Any, response: Any, idempotency_key: str) -> None:
            undone.append((name, request, response, idempotency_key))

        return compensate

    session = TestSession(
        travel,
        tools={"pay": PermanentError("card declined")},
        compensations={"cancel_hotel": undo("hotel"), "cancel_flight": undo("flight")},
    )
    with pytest.raises(PermanentError, match="card declined"):
        session.run_until_done()
    assert session.status is SessionStatus.FAILED and session.saga is SagaOutcome.COMPLETED
    assert [u[0] for u in undone] == ["flight", "hotel"]
    hotel_call = next(c for c in session.calls if c.tool == "hotel")
    assert undone[1][1:] == (
        {"args": ["paris"], "kwargs": {}}, {"id": "h1"}, hotel_call.key + ":compensate",
    )  # fmt: skip
    assert [c.tool for c in session.compensated] == ["flight", "hotel"]
    assert len(session.failures) == 1  # permanent: not retried


def test_a_compensation_that_keeps_failing_stops_the_saga() -> None:
    session = TestSession(
        travel,
        tools={"pay": PermanentError("declined")},
        compensations={"cancel_flight": PermanentError("airline down"), "cancel_hotel": None},
    )
    with pytest.raises(PermanentError, match="declined"):
        session.run_until_done()
    assert session.saga is SagaOutcome.FAILED and session.compensated == []


# -- locks, shared documents and children, between sessions --------------------------------

team = Agent("kit_team")
member = Agent("kit_member", retry=RetryPolicy(max_attempts=1))


@team.step
def fan_out(ctx: StepContext) -> Wait:
    ids = [ctx.spawn("kit_member", {"n": n}) for n in range(ctx.input["members"])]
    return ctx.wait(Children(ids, need=ctx.input.get("need", "all")), then="fan_in")


@team.step
def fan_in(ctx: StepContext) -> Complete:
    assert ctx.wake is not None and ctx.wake.kind == "children"
    return Complete(ctx.wake.payload)


@member.step
def queue_up(ctx: StepContext) -> Wait:
    return ctx.lock("printer", then="use")


@member.step
def use(ctx: StepContext) -> Any:
    assert ctx.wake is not None and ctx.wake.kind in ("lock", "timer")
    token = ctx.fence("printer")
    ctx.update_shared("printed", lambda pages: [*(pages or []), ctx.input["n"]])
    if ctx.input["n"] == 1 and not ctx.state.get("slept"):
        ctx.state["slept"] = token
        return ctx.sleep(5, then="use")  # the holder's next run gets a larger token
    if ctx.input["n"] == 2:
        raise PermanentError("paper jam")
    ctx.release("printer")
    return Complete({"token": token, "first": ctx.state.get("slept")})


def test_children_run_here_take_a_lock_in_turn_and_wake_their_parent() -> None:
    session = TestSession(team, {"members": 3}, agents=[member])
    session.run_until_wait()
    assert [c.status for c in session.children] == [SessionStatus.PENDING] * 3
    payload = session.run_until_done()
    first, second, third = (str(c.session_id) for c in session.children)
    assert payload["results"][first] == {"token": 1, "first": None}
    # The same holder, in a new run after its sleep, got a new, larger token.
    assert payload["results"][second] == {"token": 3, "first": 2}
    assert payload["failures"][third]["status"] == "failed"
    assert payload["failures"][third]["error"]["message"] == "paper jam"
    assert session.shared == {"printed": [0, 1, 1]}  # the failed step wrote nothing
    assert session.child(third).error is not None
    assert session._world.locks["printer"].holders == {}  # the failed one let it go


def test_children_of_agents_not_run_here_are_ended_by_the_test() -> None:
    session = TestSession(team, {"members": 2, "need": 1})
    with pytest.raises(AssertionError, match="of an agent not run here"):
        session.run_until_done()
    session.children[0].complete({"done": True})
    assert session.status is SessionStatus.PENDING
    result = session.run_until_done()
    assert result["results"] == {str(session.children[0].session_id): {"done": True}}
    session.children[1].fail("gave up")
    with pytest.raises(SessionStateError, match="finished already"):
        session.children[1].complete()
    with pytest.raises(InvalidArgumentError, match="spawned no child"):
        session.child("00000000-0000-0000-0000-000000000000")


def test_run_next_runs_one_step_and_raises_a_failure_the_session_will_retry() -> None:
    session = TestSession(travel, tools={"pay": answers(TransientError("later"), {"ok": 1})})
    with pytest.raises(TransientError, match="later"):
        session.run_next()
    assert session.status.value == "retrying" and session.attempts == 1
    step = session.run_next()  # after the delay, skipped
    assert step.completed and session.status.value == "completed"
    with pytest.raises(SessionStateError, match="has no step to run now"):
        session.run_next()


def test_an_async_compensation_is_awaited() -> None:
    undone: list[str] = []

    async def cancel(request: Any, response: Any) -> None:
        undone.append(request["args"][0])

    session = TestSession(
        travel,
        tools={"pay": PermanentError("no")},
        compensations={"cancel_hotel": cancel, "cancel_flight": cancel},
    )
    with pytest.raises(PermanentError):
        session.run_until_done()
    assert undone == ["paris", "paris"] and session.saga is SagaOutcome.COMPLETED


waiter = Agent("kit_waiter", retry=RetryPolicy(max_attempts=1))


@waiter.step
def take(ctx: StepContext) -> Wait:
    return ctx.lock("door", then="took", timeout=ctx.input["patience"])


@waiter.step
def took(ctx: StepContext) -> Any:
    assert ctx.wake is not None
    if ctx.wake.kind == "lock" and ctx.input["hold"]:
        return ctx.sleep(ctx.input["hold"], then="took")
    return Complete(ctx.wake.kind)


def test_a_lock_wait_that_times_out_leaves_the_queue() -> None:
    crowd = Agent("kit_crowd")
    people = [
        {"patience": 100, "hold": 60},
        {"patience": 10, "hold": 0},
        {"patience": 100, "hold": 0},
    ]

    @crowd.step
    def gather(ctx: StepContext) -> Wait:
        ids = [ctx.spawn("kit_waiter", person) for person in people]
        return ctx.wait(Children(ids), then="report")

    @crowd.step
    def report(ctx: StepContext) -> Complete:
        assert ctx.wake is not None
        return Complete(sorted(ctx.wake.payload["results"].values()))

    session = TestSession(crowd, agents=[waiter], now=START)
    # The holder sleeps a minute and finishes (letting go); the impatient one
    # times out after ten seconds and leaves the queue; the patient one is next.
    assert session.run_until_done() == ["lock", "timeout", "timer"]
    _, impatient, patient = session.children
    assert impatient.history[-1].wake is not None and impatient.history[-1].wake.timed_out
    assert patient.history[1].wake is not None
    assert patient.history[1].wake.payload == {"name": "door", "token": 2}
    assert session.now == START + timedelta(seconds=60)


def test_a_failed_child_under_on_failure_wait_keeps_its_parent_waiting() -> None:
    parent = Agent("kit_strict_parent")

    @parent.step
    def start(ctx: StepContext) -> Wait:
        kid = ctx.spawn("kit_unknown_kid")
        return ctx.wait(Children([kid], on_failure="wait"), then="end", timeout=3600)

    @parent.step
    def end(ctx: StepContext) -> Complete:
        assert ctx.wake is not None
        return Complete(ctx.wake.kind)

    session = TestSession(parent, now=START)
    session.run_until_wait()
    session.children[0].fail(PermanentError("broke"))
    assert session.status.value == "suspended"  # its dead letter is open: still waiting
    assert session.run_until_done() == "timeout"
