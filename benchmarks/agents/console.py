"""Agents for ``benchmarks/console.py``: real sessions whose rows the benchmark
clones to 10,000, and the two big sessions whose pages it times.

- ``console_order``: looks an order up, quotes it (a tool each), then as its
  input says waits for a signal ``approval`` (a day at most) or sleeps six
  hours, and charges (a tool). ``input["fail"]`` names the step whose tool
  raises ``input["error"]`` (``ConnectError``, ``ReadTimeout``, ...) on every
  attempt: after two attempts the session fails for good and is dead-lettered.
- ``console_report``: one step that renders a report; ``input["fail"]`` makes
  it raise ``ValueError`` (a second agent in the dead-letter groups).
- ``console_fanout`` spawns ``input["children"]`` ``console_item`` children and
  waits for all of them, then sums their results.
- ``console_long``: ``input["steps"]`` steps, each a tool call (an LLM turn)
  appended to a transcript in the state, stored incrementally (a snapshot
  every 20): the big session page, with a page of events, a window of 20
  checkpoints each rebuilt from its snapshot, a tool call per step whose
  answer is about 2 KB of text (a chat model's), and a state that grows by
  as much each step.
"""

from __future__ import annotations

from typing import Any

from resumable import Agent, Children, Incremental, RetryPolicy, Signal, StepContext

# Fail fast: the benchmark waits for its dead letters.
_RETRY = RetryPolicy(max_attempts=2, min_delay=0.05, max_delay=0.1, jitter=False)


class ConnectError(Exception):
    """Stands in for httpx.ConnectError (only the class name is recorded)."""


class ReadTimeout(Exception):  # noqa: N818 (httpx's name, as dead letters record it)
    """Stands in for httpx.ReadTimeout."""


class CardDeclinedError(Exception):
    """A payment API's refusal."""


ERRORS: dict[str, type[Exception]] = {
    cls.__name__: cls for cls in (ConnectError, ReadTimeout, CardDeclinedError, ValueError)
}

order = Agent(
    "console_order", description="Console benchmark: an order, approved, charged.", retry=_RETRY
)
report = Agent("console_report", description="Console benchmark: renders a report.", retry=_RETRY)
fanout = Agent("console_fanout", description="Console benchmark: fans out to items.")
item = Agent("console_item", description="Console benchmark: one item of a fan-out.")
long_run = Agent(
    "console_long",
    description="Console benchmark: a long conversation, one tool call per turn.",
    checkpoints=Incremental(snapshot_every=20),
)


def _api(name: str, ctx: StepContext, **request: Any) -> Any:
    """A stand-in for an HTTP API: answers at once, or raises the input's error."""
    fails = ctx.input.get("fail") == ctx.step

    def call(idempotency_key: str, **kwargs: Any) -> dict[str, Any]:
        if fails:
            error = ERRORS[str(ctx.input.get("error", "ConnectError"))]
            raise error(f"{name}: [Errno 111] Connection refused (api.shop.example:443)")
        return {"ok": True, "api": name, "key": idempotency_key[:16], **kwargs}

    return ctx.tool(name, call, **request)


@order.step
def look_up(ctx: StepContext) -> str:
    number = int(ctx.input["order"])
    ctx.state["order"] = _api("get_order", ctx, order_id=f"ord_{number}")
    ctx.state["customer"] = {"id": f"cus_{number % 977}", "tier": ["free", "pro"][number % 2]}
    return "quote"


@order.step
def quote(ctx: StepContext) -> str:
    number = int(ctx.input["order"])
    ctx.state["quote"] = _api("quote", ctx, amount_cents=1000 + number % 9000, currency="EUR")
    return "approve"


@order.step
def approve(ctx: StepContext) -> Any:
    wait = ctx.input.get("wait")
    if wait == "signal":
        return ctx.wait(Signal("approval"), then="charge", timeout=86400)
    if wait == "timer":
        return ctx.sleep(6 * 3600, then="charge")
    return "charge"


@order.step
def charge(ctx: StepContext) -> Any:
    amount = ctx.state["quote"]["amount_cents"]
    ctx.state["charge"] = _api("charge", ctx, amount_cents=amount, currency="EUR")
    return ctx.complete({"charged": amount})


@report.step
def render(ctx: StepContext) -> Any:
    if ctx.input.get("fail") == "render":
        raise ValueError(f"report {ctx.input.get('order')}: column 'total' is not numeric")
    return ctx.complete({"pages": 3})


@fanout.step
def split(ctx: StepContext) -> Any:
    ids = [ctx.spawn("console_item", {"n": n}) for n in range(int(ctx.input["children"]))]
    ctx.state["children"] = len(ids)
    return ctx.wait(Children(ids), then="gather")


@fanout.step
def gather(ctx: StepContext) -> Any:
    results = ctx.wake.payload["results"] if ctx.wake is not None else {}
    return ctx.complete({"total": sum(int(r["n"]) for r in results.values())})


@item.step
def work(ctx: StepContext) -> Any:
    found = _api("lookup", ctx, n=ctx.input["n"])
    return ctx.complete({"n": ctx.input["n"], "found": bool(found)})


WORDS = ("pricing page", "churn data", "support queue", "refund policy", "onboarding flow")


def chat(prompt: str, turn: int, idempotency_key: str) -> dict[str, Any]:
    """What a chat model answers: about two kilobytes of text, and its usage."""
    text = " ".join(
        f"Finding {turn}.{n}: the {WORDS[(turn + n) % len(WORDS)]} needs a closer look."
        for n in range(40)
    )
    return {
        "id": f"chatcmpl-{idempotency_key[:24]}",
        "model": "gpt-4o-2024-08-06",
        "content": text,
        "finish_reason": "stop",
        "usage": {"prompt_tokens": 900 + 40 * turn, "completion_tokens": 480},
    }


@long_run.step
def turn(ctx: StepContext) -> Any:
    index = int(ctx.state.get("turn", 0))
    prompt = f"Turn {index}: given the findings so far, what should we look at next?"
    answer = ctx.tool("llm", chat, prompt, index)
    transcript = ctx.state.setdefault("transcript", [])
    transcript.append({"role": "user", "content": prompt})
    transcript.append({"role": "assistant", "content": answer["content"]})
    ctx.state["usage"] = answer["usage"]
    ctx.state["turn"] = index + 1
    if index + 1 >= int(ctx.input["steps"]):
        return ctx.complete({"turns": index + 1})
    return "turn"
