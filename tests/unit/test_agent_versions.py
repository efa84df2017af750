"""Agent versions, step aliases, migrations and patches: the definition API."""

from __future__ import annotations

from typing import Any

import pytest

from resumable import Agent, Complete, StepContext
from resumable.agent import version_label
from resumable.errors import AgentDefinitionError, UnknownStepError
from resumable.testing import run_step


def _agent(version: int | None = None, **kwargs: Any) -> Agent:
    agent = Agent("refund", version=version, **kwargs)

    @agent.step(aliases=["book"])
    def reserve(ctx: StepContext) -> Complete:
        return Complete()

    return agent


def test_unversioned_agents_are_version_zero_and_named_without_a_version() -> None:
    agent = _agent()
    assert (agent.version, agent.label, agent.takes_over) == (0, "refund", [])
    assert _agent(3).label == "refund@3"
    assert version_label("refund", 0) == "refund"


@pytest.mark.parametrize("bad", [0, -1, "3", 2.0, True])
def test_a_version_is_a_positive_integer(bad: Any) -> None:
    with pytest.raises(AgentDefinitionError, match="positive integer"):
        Agent("refund", version=bad)


def test_an_alias_runs_the_renamed_step_and_is_not_a_step_of_its_own() -> None:
    agent = _agent(2)
    assert agent.step_names == ["reserve"]
    assert agent.resolve_step("book") == "reserve"
    assert agent.has_step("book") and agent.get_step("book") is agent.get_step("reserve")
    assert agent.resolve_step("nope") == "nope" and not agent.has_step("nope")
    with pytest.raises(UnknownStepError):
        agent.get_step("nope")


def test_aliases_cannot_shadow_steps_or_each_other() -> None:
    agent = _agent(2)
    with pytest.raises(AgentDefinitionError, match="already has a step named 'book'"):
        agent.step(lambda ctx: None, name="book")
    with pytest.raises(AgentDefinitionError, match="alias 'reserve'"):
        agent.step(lambda ctx: None, name="other", aliases=["reserve"])
    with pytest.raises(AgentDefinitionError, match="alias 'book'"):
        agent.step(lambda ctx: None, name="other", aliases=["book"])


def test_migrations_come_from_older_versions_once_each() -> None:
    agent = _agent(3)

    @agent.migrate(from_version=1)
    def from_one(state: dict[str, Any]) -> dict[str, Any]:
        return {**state, "v": 3}

    agent.migrate(from_version=0)(lambda state: state)
    assert agent.takes_over == [0, 1]
    assert agent.migration(1)({}) == {"v": 3}
    for bad in (3, 4, -1, True):
        with pytest.raises(AgentDefinitionError, match="older version"):
            agent.migrate(from_version=bad)
    with pytest.raises(AgentDefinitionError, match="already migrates from version 1"):
        agent.migrate(from_version=1)(from_one)
    with pytest.raises(AgentDefinitionError, match="no migration from version 2"):
        agent.migration(2)
    with pytest.raises(AgentDefinitionError, match="older version"):
        _agent().migrate(from_version=0)  # unversioned code migrates nothing


def test_the_fingerprint_changes_with_the_names_sessions_record_only() -> None:
    assert _agent(2).fingerprint == _agent(2).fingerprint
    renamed = Agent("refund", version=2)
    renamed.step(lambda ctx: Complete(), name="reserve")  # the alias is gone
    assert renamed.fingerprint != _agent(2).fingerprint
    checked = _agent(2)
    checked.check(lambda args: None, name="ready")
    assert checked.fingerprint != _agent(2).fingerprint


@pytest.mark.parametrize("patches", [{"p": 0}, {"p": 4}, {"": 1}, {"p": "2"}])
def test_a_patch_names_the_version_that_introduced_it(patches: dict[str, Any]) -> None:
    with pytest.raises(AgentDefinitionError, match="patch"):
        _agent(3, patches=patches)


patched = Agent("patched", version=3, patches={"euros": 2})


@patched.step
def pay(ctx: StepContext) -> Complete:
    return Complete({"version": ctx.version, "euros": ctx.patched(ctx.input or "euros")})


def test_patched_is_true_for_sessions_started_on_a_version_with_the_patch() -> None:
    def euros(version: int) -> bool:
        result = run_step(patched, "pay", version=version).result
        assert result["version"] == version
        return bool(result["euros"])

    assert [euros(version) for version in (0, 1, 2, 3)] == [False, False, True, True]
    assert run_step(patched, "pay").result == {"version": 3, "euros": True}  # a new session
    with pytest.raises(AgentDefinitionError, match="declares no patch 'typo'"):
        run_step(patched, "pay", input="typo")
