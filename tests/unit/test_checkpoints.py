"""The patch generator and applier behind incremental checkpoints."""

from __future__ import annotations

import copy
import random
from typing import Any

import jsonpatch
import pytest

from resumable._internal.redaction import REDACTED, Redactor
from resumable.checkpoints import Incremental, Snapshot, apply_patch, diff, is_snapshot_seq


def _random_json(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.3:
        return rng.choice([0, 1, "a", "b", None, True, 1.5, [], {}])
    if roll < 0.65:
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    keys = ["a", "b", "c/d", "e~f", ""]
    return {rng.choice(keys): _random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))}


@pytest.mark.parametrize("seed", range(5))
def test_diff_then_apply_gives_the_new_value(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(400):
        old, new = _random_json(rng), _random_json(rng)
        patch = diff(old, new)
        assert apply_patch(copy.deepcopy(old), patch) == new
        # The patch is RFC 6902: the reference implementation agrees.
        assert jsonpatch.apply_patch(old, patch) == new


def test_small_changes_give_small_patches() -> None:
    old: dict[str, Any] = {"memory": [{"id": i, "text": "x" * 40} for i in range(300)], "n": 1}
    new = copy.deepcopy(old)
    new["memory"][7]["text"] = "changed"
    new["n"] = 2
    new["memory"].append({"id": 300})
    assert diff(old, new) == [
        {"op": "replace", "path": "/memory/7/text", "value": "changed"},
        {"op": "add", "path": "/memory/-", "value": {"id": 300}},
        {"op": "replace", "path": "/n", "value": 2},
    ]


def test_snapshot_cadence_bounds_the_chain() -> None:
    assert [s for s in range(1, 12) if is_snapshot_seq(Incremental(5), s)] == [1, 6, 11]
    assert all(is_snapshot_seq(Snapshot(), s) for s in range(1, 5))


def test_redaction_copies_only_what_it_changes() -> None:
    redactor = Redactor()
    clean = {"max_tokens": 5, "notes": ["token budget"]}
    assert redactor.redact(clean) is clean
    assert not redactor.might_match('{"max_tokens": 5}')
    found: set[str] = set()
    state: dict[str, Any] = {"auth": {"Api-Key": "sk-123456", "user": "a"}, "x_token": "tok-abcdef"}
    redacted = redactor.redact(state, found)
    assert redacted == {"auth": {"Api-Key": REDACTED, "user": "a"}, "x_token": REDACTED}
    assert state["auth"]["Api-Key"] == "sk-123456"  # the live state is untouched
    assert found == {"sk-123456", "tok-abcdef"}
    assert Redactor.scrub("bad key sk-123456", found) == f"bad key {REDACTED}"
