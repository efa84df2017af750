"""A research team: a planner fans out to researchers, a writer fans in, a
reviewer approves by signal. Self-contained (the "search" is a stand-in
function; swap in a real API or an LLM with ``ctx.tool``). Input::

    {"question": "...", "topics": ["a", "b", "c", "d", "e"]}

What it shows:

- ``ctx.spawn``: the planner starts one ``researcher`` child per topic. The
  children are created in the planner step's own commit, with ids derived
  from it, so a planner that crashes and replays starts none twice.
- A semaphore: at most two researchers call the (rate-limited) search API at
  once, across every team and every worker; the others wait suspended, holding
  no worker, and go in FIFO order.
- Shared state: researchers add what they found to one shared source cache
  with ``ctx.update_shared``, a lock-free atomic update that commits with
  their step (no source is lost however many write at once), and skip a
  search another researcher already did.
- ``Children``: the planner's ``write`` step runs once all researchers
  finished, with their results in ``ctx.wake.payload``.
- A human review: the report waits for ``POST /v1/sessions/{id}/signals/review``
  with ``{"approved": true}`` (or ``{"approved": false, "feedback": "..."}``
  to have it rewritten).

Run a worker with ``python -m resumable.cli worker --agents examples.research_team``.
"""

from __future__ import annotations

from typing import Any

from resumable import Agent, Children, Signal, StepContext

planner = Agent("research_team", description="Plans, fans out to researchers, writes, is reviewed.")
researcher = Agent("team_researcher", description="Researches one topic for a research team.")

#: The shared cache of every source found, by topic (one document for all teams).
SOURCES = "research_team:sources"
#: At most this many researchers search at once.
SEARCH_PERMITS = 2


def search(topic: str, idempotency_key: str) -> list[dict[str, str]]:
    """Stand-in for a search API (a real one gets `idempotency_key` passed on)."""
    return [
        {"title": f"{topic}: an overview", "url": f"https://example.org/{topic}/overview"},
        {"title": f"{topic}: recent results", "url": f"https://example.org/{topic}/recent"},
    ]


def _add_sources(topic: str, found: list[dict[str, str]]) -> Any:
    """An update of the shared cache: pure, so it can be applied at commit."""

    def update(cache: dict[str, Any] | None) -> dict[str, Any]:
        return {**(cache or {}), topic: found}

    return update


@planner.step
def plan(ctx: StepContext) -> Any:
    topics = ctx.input["topics"]
    ids = [ctx.spawn("team_researcher", {"topic": topic}) for topic in topics]
    ctx.state["researchers"] = [str(i) for i in ids]
    return ctx.wait(Children(ids), then="write")


@planner.step
def write(ctx: StepContext) -> Any:
    if ctx.wake is not None and ctx.wake.kind == "children":
        ctx.state["findings"] = sorted(
            ctx.wake.payload["results"].values(), key=lambda f: str(f["topic"])
        )
        ctx.state["failed"] = len(ctx.wake.payload["failures"])
    lines = [f"# {ctx.input['question']}"]
    for finding in ctx.state["findings"]:
        lines.append(f"- {finding['topic']}: {finding['sources']} sources")
    if ctx.state.get("feedback"):
        lines.append(f"(revised: {ctx.state['feedback']})")
    ctx.state["report"] = "\n".join(lines)
    return ctx.wait(Signal("review"), then="reviewed")


@planner.step
def reviewed(ctx: StepContext) -> Any:
    assert ctx.wake is not None
    verdict = ctx.wake.payload or {}
    if verdict.get("approved"):
        return ctx.complete({"report": ctx.state["report"], "approved_by": verdict.get("by")})
    ctx.state["feedback"] = verdict.get("feedback", "")
    return "write"


@researcher.step
def start(ctx: StepContext) -> Any:
    cached = ctx.shared(SOURCES, default={}).get(ctx.input["topic"])
    if cached is not None:  # another researcher searched it already
        return ctx.complete({"topic": ctx.input["topic"], "sources": len(cached)})
    return ctx.semaphore("search-api", SEARCH_PERMITS, then="search_topic")


@researcher.step
def search_topic(ctx: StepContext) -> Any:
    topic = ctx.input["topic"]
    found = ctx.tool("search", search, topic)
    ctx.update_shared(SOURCES, _add_sources(topic, found))
    ctx.release("search-api")  # when this step commits
    return ctx.complete({"topic": topic, "sources": len(found)})
