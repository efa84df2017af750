"""Turning each step's state into its checkpoint row, redacted.

One writer per run of the step loop: it remembers the previous row's
(redacted) state so an incremental checkpoint can store just the patch from
it, and collects the secret values it redacted so error texts can be
scrubbed of them too.
"""

from __future__ import annotations

import json
from typing import Any

from resumable import checkpoints, serialization
from resumable.checkpoints import CheckpointRecord, CheckpointStrategy, Incremental
from resumable.redaction import Redactor


class CheckpointWriter:
    def __init__(
        self,
        strategy: CheckpointStrategy,
        redactor: Redactor,
        live_state: dict[str, Any],
        *,
        rebase: bool,
    ) -> None:
        self.strategy = strategy
        self.redactor = redactor
        self.secrets: set[str] = set()
        self._previous: dict[str, Any] | None = None
        if isinstance(strategy, Incremental) and not rebase:
            # A private copy: the next step mutates the live state in place.
            redacted = redactor.redact(live_state, self.secrets)
            self._previous = json.loads(serialization.dumps(redacted, "state"))
        elif not rebase:
            redactor.redact(live_state, self.secrets)
        self._force_snapshot = rebase

    def record(
        self, seq: int, state: dict[str, Any], encoded_state: str, events: list[Any] | None
    ) -> CheckpointRecord:
        """The row for step `seq` whose resulting live state is `state`."""
        if self.redactor.might_match(encoded_state):
            redacted = self.redactor.redact(state, self.secrets)
        else:
            redacted = state
        encoded = encoded_state if redacted is state else serialization.dumps(redacted)
        redacted_events = self.redactor.redact(events, self.secrets) if events is not None else None
        previous = None if self._force_snapshot else self._previous
        if not isinstance(self.strategy, Incremental):
            previous = None if self._force_snapshot else {}
        row = checkpoints.record(self.strategy, seq, previous, redacted, encoded, redacted_events)
        if isinstance(self.strategy, Incremental):
            self._previous = json.loads(encoded)
        self._force_snapshot = False
        return row

    def redact(self, value: Any) -> Any:
        return self.redactor.redact(value, self.secrets)
