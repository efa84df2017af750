"""Concurrency(...) definitions: what an agent may declare, and what it is refused."""

from __future__ import annotations

import pytest

from resumable import Agent, AgentDefinitionError, Concurrency


def test_a_limit_per_agent_or_per_input_field_or_path() -> None:
    assert Concurrency(limit=3).spec() == {"limit": 3, "key": []}
    assert Concurrency(limit=2, key="tenant").spec() == {"limit": 2, "key": ["tenant"]}
    assert Concurrency(limit=1, key=["customer", "id"]).path == ("customer", "id")
    assert Concurrency(limit=2, key="tenant").describe() == "2 at a time per input.tenant"
    agent = Agent("limited", concurrency=Concurrency(limit=4))
    assert agent.concurrency == Concurrency(limit=4)
    assert Agent("free").concurrency is None


@pytest.mark.parametrize(
    ("limit", "key"),
    [
        (0, None),
        (-1, None),
        (True, None),
        (2.5, None),
        ("2", None),
        (10**7, None),
        (1, ""),
        (1, []),
        (1, ["a", ""]),
        (1, ["a", 3]),
        (1, "bad\x00field"),
        (1, "\ud800"),
        (1, b"tenant"),
        (1, 7),
        (1, ["a"] * 9),
    ],
)
def test_a_wrong_limit_or_key_is_refused_when_the_agent_is_defined(
    limit: object, key: object
) -> None:
    with pytest.raises(AgentDefinitionError):
        Concurrency(limit=limit, key=key)  # type: ignore[arg-type]


def test_an_agent_refuses_what_is_not_a_concurrency() -> None:
    with pytest.raises(AgentDefinitionError, match="Concurrency"):
        Agent("limited", concurrency=2)  # type: ignore[arg-type]


def test_a_step_limit_is_held_for_that_step_and_named_under_its_aliases() -> None:
    agent = Agent("stepped")

    @agent.step
    def first(ctx: object) -> str:
        return "call"

    @agent.step(concurrency=Concurrency(limit=3, key="tenant"), aliases=["old_call"])
    def call(ctx: object) -> str:
        return "first"

    assert agent.slot_scope("first") is None
    assert agent.slot_scope("call") == "call"
    assert agent.slot_scope("old_call") == "call"  # a session recorded at the old name
    assert agent.step_concurrency("call") == Concurrency(limit=3, key="tenant")
    spec = {"limit": 3, "key": ["tenant"], "step": "call"}
    assert agent.limits_spec() == {"call": spec, "old_call": spec}
    whole = Agent("whole", concurrency=Concurrency(limit=2))
    assert whole.slot_scope("anything") == ""
    assert whole.limits_spec() == {"*": {"limit": 2, "key": []}}
    assert Agent("free").limits_spec() is None


def test_an_agent_limited_as_a_whole_takes_no_step_limit() -> None:
    whole = Agent("whole", concurrency=Concurrency(limit=2))
    with pytest.raises(AgentDefinitionError, match="as a whole"):
        whole.step(lambda ctx: None, name="s", concurrency=Concurrency(limit=1))
    with pytest.raises(AgentDefinitionError, match="Concurrency"):
        Agent("x").step(lambda ctx: None, name="s", concurrency=3)  # type: ignore[call-overload]


def test_a_step_named_star_takes_no_limit_of_its_own() -> None:
    """'*' stands for the agent's own limit in what a claim reads."""
    with pytest.raises(AgentDefinitionError, match=r"'\*'"):
        Agent("starred").step(lambda ctx: None, name="*", concurrency=Concurrency(limit=1))
    with pytest.raises(AgentDefinitionError, match=r"'\*'"):
        Agent("aliased").step(
            lambda ctx: None, name="s", aliases=["*"], concurrency=Concurrency(limit=1)
        )
