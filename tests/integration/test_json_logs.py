"""A real worker with RESUMABLE_LOG_FORMAT=json: every line it prints is one
JSON object, and the lines about a session name it."""

from __future__ import annotations

import json
from collections.abc import Callable

from resumable.client import Client
from tests.conftest import ManagedProcess, wait_until


def test_a_worker_logs_one_json_object_per_line_naming_the_session(
    client: Client, start_worker: Callable[..., ManagedProcess]
) -> None:
    worker = start_worker(RESUMABLE_LOG_FORMAT="json")
    session_id = client.start("five")
    wait_until(lambda: client.get(session_id).status == "completed", what="the session")
    wait_until(lambda: "session completed" in worker.output(), what="the completion line")
    lines = [json.loads(line) for line in worker.output().splitlines() if line.strip()]
    assert {"time", "level", "logger", "message"} <= set(lines[0])
    [completed] = [line for line in lines if "session completed" in str(line["message"])]
    assert completed["session_id"] == str(session_id)
    assert completed["agent"] == "five" and isinstance(completed["epoch"], int)
    assert completed["action"] == "completed"
