"""The incremental step path: the exact diff, the redacted patch, and what the
checkpoint writer hands the commit (a patch or the whole state)."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from resumable._internal.redaction import REDACTED, Redactor
from resumable.checkpoints import Incremental, Snapshot, apply_patch
from resumable.errors import NotSerializableError
from resumable.models import live_state
from resumable.queue.checkpoint_writer import CheckpointWriter


def _patched(old: dict[str, Any], new: dict[str, Any]) -> Any:
    ops = live_state.diff(live_state.exact_copy(json.dumps(old)), new)
    return apply_patch(copy.deepcopy(old), json.loads(json.dumps(ops)))


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ({"a": 1}, {"a": True}),
        ({"a": True}, {"a": 1}),
        ({"a": 1}, {"a": 1.0}),
        ({"a": 1.0}, {"a": 1}),
        ({"a": [0, False]}, {"a": [0, 0]}),
        ({"a": [[1]]}, {"a": [[True]]}),
        ({"a": {"b": 0}}, {"a": {"b": False}}),
        ({"a": [1, 2, 3]}, {"a": [1]}),
        ({"a": [1]}, {"a": [1, 2, 3]}),
        ({"a/b~c": 1, "x": 2}, {"a/b~c": 3}),
    ],
)
def test_diff_is_exact_where_python_equality_is_not(
    old: dict[str, Any], new: dict[str, Any]
) -> None:
    result = _patched(old, new)
    assert json.dumps(result) == json.dumps(new)


def test_an_unchanged_state_has_an_empty_patch() -> None:
    state = {"n": 1, "f": 0.5, "b": True, "l": [True, 1, [False]], "d": {"x": None}}
    assert live_state.diff(live_state.exact_copy(json.dumps(state)), state) == []


@pytest.mark.parametrize(
    ("new", "where"),
    [
        ({"keep": 1, "bad": {1, 2}}, "state.bad (set)"),
        ({"keep": 1, "bad": float("nan")}, "state.bad (non-finite float nan)"),
        ({"keep": 1, "bad": {1: "int key"}}, "state.bad (key 1 is not a string)"),
    ],
)
def test_a_changed_value_json_cannot_hold_is_refused_by_name(
    new: dict[str, Any], where: str
) -> None:
    with pytest.raises(NotSerializableError, match="at " + re.escape(where)):
        live_state.diff(live_state.exact_copy('{"keep": 1}'), new)


def test_redacted_patch_applies_to_the_redacted_history() -> None:
    redactor = Redactor()
    old = {"creds": {"api_key": "sk-old-secret", "user": "a"}, "notes": ["x"]}
    new = {
        "creds": {"api_key": "sk-new-secret", "user": "b"},
        "notes": ["x", {"token": "tok-123456"}],
        "password": "hunter22",
    }
    found: set[str] = set()
    ops = live_state.diff(live_state.exact_copy(json.dumps(old)), new)
    redacted_ops = redactor.redact_patch(ops, found)
    history = apply_patch(redactor.redact(copy.deepcopy(old)), redacted_ops)
    assert history == redactor.redact(new)
    assert {"sk-new-secret", "tok-123456", "hunter22"} <= found
    assert REDACTED in json.dumps(redacted_ops)
    assert "sk-new-secret" not in json.dumps(redacted_ops)


def test_an_operation_inside_a_secret_replaces_the_marker() -> None:
    redactor = Redactor()
    ops = [{"op": "replace", "path": "/credentials/inner/x", "value": "s3cr3t-value"}]
    assert redactor.redact_patch(ops) == [
        {"op": "replace", "path": "/credentials", "value": REDACTED}
    ]


def test_a_patch_without_secrets_is_returned_as_is() -> None:
    ops = [{"op": "replace", "path": "/a/0", "value": {"text": "hello"}}]
    assert Redactor().redact_patch(ops) is ops


def _big_state() -> dict[str, Any]:
    return {"memory": [{"id": i, "text": "w" * 100} for i in range(200)], "n": 0}


def test_incremental_steps_append_patches_and_fold_at_snapshots() -> None:
    state = _big_state()
    writer = CheckpointWriter(Incremental(snapshot_every=5), Redactor(), state, rebase=False)
    kinds = []
    for seq in range(2, 12):
        state["memory"][seq]["text"] = f"changed {seq}"
        state["n"] = seq
        written = writer.record(seq, state, None)
        kinds.append("full" if written.full else "patch")
        if written.full is None:
            assert written.patch is not None and len(written.patch) < 200
            assert written.history.kind == "delta"
        else:
            assert json.loads(written.full) == state
    # snapshots at seq 6 and 11 (1, K+1, 2K+1...): the live state is folded there
    assert kinds == ["patch"] * 4 + ["full"] + ["patch"] * 4 + ["full"]


def test_the_live_state_folds_when_its_patch_grows_and_when_the_session_finishes() -> None:
    state = {"small": 0, "big": "x" * 1000}
    writer = CheckpointWriter(Incremental(snapshot_every=1000), Redactor(), state, rebase=False)
    state["small"] = 1
    assert writer.record(2, state, None).full is None
    state["big"] = "y" * 1000  # a patch past a quarter of the state
    assert writer.record(3, state, None).full is not None
    state["small"] = 2
    assert writer.record(4, state, None, finishing=True).full is not None


def test_a_rebase_makes_the_first_checkpoint_a_snapshot() -> None:
    state = _big_state()
    writer = CheckpointWriter(Incremental(), Redactor(), state, rebase=True)
    state["n"] = 1
    written = writer.record(7, state, None)
    assert written.history.kind == "snapshot" and written.full is not None


def test_the_step_mutating_a_value_after_the_record_does_not_change_the_copy() -> None:
    state: dict[str, Any] = {"items": [], "padding": "p" * 1000}
    writer = CheckpointWriter(Incremental(snapshot_every=100), Redactor(), state, rebase=False)
    item = {"v": 1}
    state["items"].append(item)
    first = writer.record(2, state, None)
    item["v"] = 2  # the next step mutates the same object in place
    second = writer.record(3, state, None)
    assert first.patch is not None and second.patch is not None
    assert json.loads(second.patch) == [{"op": "replace", "path": "/items/0/v", "value": 2}]


def test_snapshot_agents_still_write_the_whole_state() -> None:
    state = {"api_key": "sk-live-secret", "n": 1}
    writer = CheckpointWriter(Snapshot(), Redactor(), state, rebase=False)
    written = writer.record(2, state, None)
    assert written.full is not None and json.loads(written.full) == state
    assert written.history.state is not None and "sk-live-secret" not in written.history.state
