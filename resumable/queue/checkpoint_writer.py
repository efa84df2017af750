"""Turning each step's state into what its commit writes: the live state (whole,
or as a patch) and the checkpoint row, redacted.

One writer per run of the step loop. For an incremental agent it keeps a
private copy of the last committed live state, so each step costs in
proportion to what it changed: the diff against the copy (unchanged subtrees
compared in C) finds the change, and only the change is validated, redacted,
encoded, appended to the session row's `state_patch` and stored as the
checkpoint's delta (see ``resumable/models/live_state.py``). Snapshot and
event-sourced agents write the whole state every step, as their history does.

The writer also collects the secret values it redacted so error texts can be
scrubbed of them too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from resumable import checkpoints
from resumable._internal import serialization
from resumable._internal.redaction import Redactor
from resumable.checkpoints import CheckpointRecord, CheckpointStrategy, Incremental
from resumable.models import live_state

# The patch on the session row is folded into the state when it passes this
# fraction of the state's encoded size (reading it back then costs about as
# much as the state itself), and at every history snapshot.
FOLD_FRACTION = 0.25


def _encode(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class StepState:
    """What a step's commit writes for its state."""

    full: str | None  # the whole live state, encoded; None when `patch` is appended instead
    patch: str | None  # the JSON Patch appended to `sessions.state_patch`
    history: CheckpointRecord


class CheckpointWriter:
    def __init__(
        self,
        strategy: CheckpointStrategy,
        redactor: Redactor,
        live_state: dict[str, Any],
        *,
        rebase: bool,
        pending_patch: list[Any] | None = None,
    ) -> None:
        self.strategy = strategy
        self.redactor = redactor
        self.secrets: set[str] = set()
        encoded = _encode(live_state)
        if redactor.might_match(encoded):  # collect the secrets error texts must not show
            redactor.redact(live_state, self.secrets)
        self._force_snapshot = rebase
        self._previous: Any = None
        self._full_bytes = 0
        self._patch_bytes = 0
        if isinstance(strategy, Incremental):
            # A private copy: the next step mutates the live state in place.
            self._previous = live_state_copy(encoded)
            self._full_bytes = len(encoded)
            self._patch_bytes = len(json.dumps(pending_patch)) if pending_patch else 0

    def record(
        self,
        seq: int,
        state: dict[str, Any],
        events: list[Any] | None,
        *,
        finishing: bool = False,
    ) -> StepState:
        """What step `seq`, whose resulting live state is `state`, writes.
        `finishing`: the session completes with it (the live state is then
        written whole, so a finished session's row holds it without a patch)."""
        if not isinstance(self.strategy, Incremental):
            return self._record_whole(seq, state, events)
        ops = live_state.diff(self._previous, state)
        patch = _encode(ops)
        snapshot = self._force_snapshot or checkpoints.is_snapshot_seq(self.strategy, seq)
        self._force_snapshot = False
        fold = (
            snapshot
            or finishing
            or self._patch_bytes + len(patch) > self._full_bytes * FOLD_FRACTION
        )
        # Values are copied through their encoding: the step may mutate them.
        self._previous = live_state.apply(self._previous, live_state_copy(patch))
        full = None
        if fold:
            full = _encode(state)
            self._full_bytes, self._patch_bytes = len(full), 0
        else:
            self._patch_bytes += len(patch)
        if snapshot:
            assert full is not None
            history = CheckpointRecord("snapshot", self._redacted_whole(state, full), None, None)
        else:
            redacted_ops = self.redactor.redact_patch(ops, self.secrets)
            delta = patch if redacted_ops is ops else _encode(redacted_ops)
            history = CheckpointRecord("delta", None, delta, None)
        return StepState(full, None if fold else patch, history)

    def _record_whole(self, seq: int, state: dict[str, Any], events: list[Any] | None) -> StepState:
        encoded = serialization.dumps(state, "state")
        redacted = self._redacted_whole(state, encoded)
        redacted_events = self.redactor.redact(events, self.secrets) if events is not None else None
        previous: dict[str, Any] | None = None if self._force_snapshot else {}
        row = checkpoints.record(self.strategy, seq, previous, {}, redacted, redacted_events)
        self._force_snapshot = False
        return StepState(encoded, None, row)

    def _redacted_whole(self, state: dict[str, Any], encoded: str) -> str:
        """The encoded state for the record: `encoded` itself when no key in it
        can be secret."""
        if not self.redactor.might_match(encoded):
            return encoded
        redacted = self.redactor.redact(state, self.secrets)
        return encoded if redacted is state else serialization.dumps(redacted)

    def redact(self, value: Any) -> Any:
        return self.redactor.redact(value, self.secrets)


def live_state_copy(encoded: str) -> Any:
    return live_state.exact_copy(encoded)
