"""What a lock or children wait stores, and the definitions it refuses."""

from __future__ import annotations

import uuid

import pytest

from resumable import Children, CoordinationError, Lock, Wait
from resumable.coordination.children import child_id
from resumable.coordination.shared import check_name
from resumable.errors import WaitDefinitionError


def test_a_lock_wait_stores_its_name_permits_and_deadline() -> None:
    spec = Wait(conditions=(Lock("payments:42", 3, timeout=5),), then="pay").spec()
    assert spec["lock"] == {"name": "payments:42", "permits": 3}
    assert spec["deadline"] == spec["wake_at"]


def test_a_children_wait_resolves_all_any_and_n() -> None:
    ids = [uuid.uuid4() for _ in range(4)]
    assert Children(ids).spec()["need"] == 4
    assert Children(ids, need="any").spec()["need"] == 1
    spec = Wait(conditions=(Children(ids, need=2, on_failure="wait"),), then="x").spec()
    assert spec["children"] == {"ids": [str(i) for i in ids], "need": 2, "on_failure": "wait"}
    assert spec["wake_at"] is None


@pytest.mark.parametrize(
    "conditions",
    [
        (Lock("a", 0),),
        (Lock("a"), Lock("b")),
        (Children([]),),
        (Children([uuid.uuid4()], need=2),),
        (Children([uuid.uuid4()], on_failure="fail"),),  # type: ignore[arg-type]
    ],
)
def test_bad_definitions_are_refused(conditions: tuple[Lock | Children, ...]) -> None:
    with pytest.raises(WaitDefinitionError):
        Wait(conditions=conditions, then="x").spec()


@pytest.mark.parametrize("name", ["", "x" * 201, "a\x00b", "line\nbreak", 42])
def test_bad_names_are_refused(name: object) -> None:
    with pytest.raises(CoordinationError):
        check_name(name)


def test_child_ids_are_deterministic_per_parent_step_and_call() -> None:
    parent = uuid.uuid4()
    assert child_id(parent, 3, 0) == child_id(parent, 3, 0)
    assert len({child_id(parent, 3, 0), child_id(parent, 3, 1), child_id(parent, 4, 0)}) == 3
