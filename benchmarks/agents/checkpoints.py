"""The agents of ``benchmarks/checkpoints.py``; the worker subprocesses import it.

Three agents run the same steps on the same state and differ only in their
checkpoint strategy: ``Snapshot()``, ``Incremental(snapshot_every=20)`` and
``EventSourced(reducer, snapshot_every=50)``.

The state is shaped like an agent's working memory: a task, a short plan,
progress counters and a list of memory items (``{"id", "kind", "text",
"step"}``), filled until its JSON encoding reaches ``input["size"]`` bytes.
Every step after the first rewrites the text of a few memory items (about
2 % of the state's bytes), bumps the progress counters and, every tenth
step, ticks a plan entry. All of it is derived from ``(seed, seq)`` only, so
the state after step N is the same for the three agents, and the benchmark
can compute it independently to check what a rebuild returns.

Input: ``{"size": bytes, "seed": int, "steps": N, "pause_at": seq or null,
"change": bytes or null}``; ``change`` sets the bytes each step rewrites
(default about 2 % of ``size``).
Step 1 (``init``) builds the state; steps 2..N (``work``) change it; step N
completes the session. With ``pause_at``, the step with that sequence number
suspends on the signal ``continue`` afterwards (the benchmark measures loads
on the quiet session, then signals it to go on).
"""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

from resumable import Agent, Complete, Signal, StepContext
from resumable.checkpoints import CheckpointStrategy, EventSourced, Incremental, Snapshot

SNAPSHOT_AGENT = "bench_ckpt_snapshot"
INCREMENTAL_AGENT = "bench_ckpt_incremental"
EVENTS_AGENT = "bench_ckpt_events"
INCREMENTAL_EVERY = 20
EVENTS_EVERY = 50

CHANGE_FRACTION = 0.02  # of the state's bytes, rewritten by each step
PLAN_ENTRIES = 4
PLAN_EVERY = 10  # a plan entry is ticked every this many steps
CONTINUE_TOPIC = "continue"

# Made-up words of common English letter pairs, drawn with Zipf frequencies like
# the words of prose: PostgreSQL compresses the state about 2.5x, as it does
# English notes in this JSON shape (measured; uniformly drawn words compress less,
# a small vocabulary more).
_LETTER_PAIRS = (
    "th e an in er re on at en nd ti es or te of ed is it al ar st to nt ng se ha as ou io le"
    " ve co me de hi ri ro ic ne ea ra ce li ch ll be ma si om ur"
)
_SYLLABLES = _LETTER_PAIRS.split()
_WORDS = [
    "".join(random.Random(index).choices(_SYLLABLES, k=1 + index % 4)) for index in range(2000)
]
_ZIPF = list(itertools.accumulate(1 / rank for rank in range(1, len(_WORDS) + 1)))


def _encoded_length(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _text(rng: random.Random, length: int) -> str:
    """Words from a fixed vocabulary, `length` characters. Drawn in batches (one
    `choices` call each), so building a 1 MB state costs the agent ~10x less
    CPU than word by word, which would otherwise weigh on the CPU per step."""
    text = ""
    while len(text) < length:
        words = rng.choices(_WORDS, cum_weights=_ZIPF, k=length // 4 + 1)
        text = f"{text} {' '.join(words)}" if text else " ".join(words)
    return text[:length]


def item_text_length(size: int) -> int:
    """Characters of one memory item's text: short notes in a small state, paragraphs
    in a large one."""
    return max(24, min(200, size // 400))


def items_per_step(size: int, change: int | None = None) -> int:
    """Memory items rewritten by each step: their text is `change` bytes, by
    default ~2 % of the state's bytes."""
    if change:
        return max(1, change // item_text_length(size))
    return max(1, int(CHANGE_FRACTION * size / item_text_length(size)))


def build_state(size: int, seed: int, change: int | None = None) -> dict[str, Any]:
    """The working memory after step 1: about `size` bytes of JSON."""
    rng = random.Random(seed)
    text_length = item_text_length(size)
    task: dict[str, Any] = {"goal": _text(rng, 80), "seed": seed, "size": size}
    if change:
        task["change"] = change
    state: dict[str, Any] = {
        "task": task,
        "plan": [
            {"step": _text(rng, min(60, text_length)), "done": False} for _ in range(PLAN_ENTRIES)
        ],
        "progress": {"step": 1, "items_rewritten": 0, "plan_ticks": 0, "llm_calls": 0},
        "memory": [],
    }
    length = _encoded_length(state)
    memory: list[dict[str, Any]] = state["memory"]
    while True:
        kind = "observation" if len(memory) % 3 else "fact"
        item = {"id": len(memory), "kind": kind, "text": _text(rng, text_length), "step": 1}
        added = _encoded_length(item) + (1 if memory else 0)
        if memory and length + added > size:
            return state
        memory.append(item)
        length += added


def make_change(state: dict[str, Any], seq: int) -> dict[str, Any]:
    """What step `seq` (>= 2) does to the state, as an event: deterministic in
    the seed and `seq`."""
    task = state["task"]
    size, seed = int(task["size"]), int(task["seed"])
    rng = random.Random(seed * 1_000_003 + seq)
    count = min(items_per_step(size, task.get("change")), len(state["memory"]))
    indexes = rng.sample(range(len(state["memory"])), count)
    return {
        "type": "rewrite",
        "seq": seq,
        "items": [[index, _text(rng, item_text_length(size))] for index in indexes],
        "tick": (seq // PLAN_EVERY) % PLAN_ENTRIES if seq % PLAN_EVERY == 0 else None,
        "llm_calls": rng.randint(1, 3),
    }


def reducer(state: dict[str, Any], event: Any) -> dict[str, Any]:
    """Apply one event (in place); the event-sourced agent's reducer."""
    if event["type"] == "init":
        return build_state(int(event["size"]), int(event["seed"]), event.get("change"))
    seq = int(event["seq"])
    memory = state["memory"]
    for index, text in event["items"]:
        memory[index]["text"] = text
        memory[index]["step"] = seq
    progress = state["progress"]
    progress["step"] = seq
    progress["items_rewritten"] += len(event["items"])
    progress["llm_calls"] += int(event["llm_calls"])
    if event["tick"] is not None:
        entry = state["plan"][int(event["tick"])]
        entry["done"] = not entry["done"]
        progress["plan_ticks"] += 1
    return state


def expected_state(size: int, seed: int, seq: int, change: int | None = None) -> dict[str, Any]:
    """The state after step `seq`, computed here rather than read back."""
    state = build_state(size, seed, change)
    for step in range(2, seq + 1):
        state = reducer(state, make_change(state, step))
    return state


def _make_agent(name: str, strategy: CheckpointStrategy) -> Agent:
    agent = Agent(name, checkpoints=strategy, description=f"Checkpoint benchmark: {name}.")
    event_sourced = isinstance(strategy, EventSourced)

    def apply(ctx: StepContext, event: dict[str, Any]) -> None:
        if event_sourced:
            ctx.emit(event)
        else:
            ctx.state = reducer(ctx.state, event)

    def after(ctx: StepContext) -> object:
        if ctx.seq >= int(ctx.input["steps"]):
            return Complete({"steps": ctx.seq})
        if ctx.seq == ctx.input.get("pause_at"):
            return ctx.wait(Signal(CONTINUE_TOPIC), then="work")
        return "work"

    def init(ctx: StepContext) -> object:
        init_event = {"type": "init", "size": ctx.input["size"], "seed": ctx.input["seed"]}
        if ctx.input.get("change"):
            init_event["change"] = ctx.input["change"]
        apply(ctx, init_event)
        return after(ctx)

    def work(ctx: StepContext) -> object:
        apply(ctx, make_change(ctx.state, ctx.seq))
        return after(ctx)

    agent.step(init, name="init")
    agent.step(work, name="work")
    return agent


snapshot_agent = _make_agent(SNAPSHOT_AGENT, Snapshot())
incremental_agent = _make_agent(INCREMENTAL_AGENT, Incremental(snapshot_every=INCREMENTAL_EVERY))
events_agent = _make_agent(EVENTS_AGENT, EventSourced(reducer, snapshot_every=EVENTS_EVERY))

AGENTS: dict[str, Agent] = {
    "snapshot": snapshot_agent,
    "incremental": incremental_agent,
    "event-sourced": events_agent,
}
