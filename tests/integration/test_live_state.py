"""An incremental step writes its patch, not the whole state: the live state
read at claim, through the API and through the history is still exactly what
the last committed step left, also after a worker is SIGKILLed mid-step."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from resumable.client import Client
from tests.conftest import LocalDeployment, wait_until
from tests.integration.live_state_agents import expected

AGENTS = "tests.integration.live_state_agents"


def _row(client: Client, session_id: uuid.UUID) -> tuple[int, object]:
    with client.db.connection() as conn:
        row = conn.execute(
            "SELECT step_seq, state_patch FROM sessions WHERE id = %s", [session_id]
        ).fetchone()
    assert row is not None
    return int(str(row["step_seq"])), row["state_patch"]


def _exactly(value: object) -> str:
    return json.dumps(value, sort_keys=True)


def test_sigkill_with_a_pending_patch_resumes_from_the_exact_state(
    client: Client, reconciler: None, tmp_path: Path, deployment: LocalDeployment
) -> None:
    (tmp_path / "hold").touch()
    victim = deployment.worker(AGENTS)
    session_id = client.start("live_patched", {"steps": 9, "hold_at": 6, "gate_dir": str(tmp_path)})
    wait_until((tmp_path / "entered-grow-6").exists, what="step 6 to start")
    seq, patch = _row(client, session_id)
    assert seq == 5
    assert isinstance(patch, list) and patch, "steps 2-5 appended patches"
    # The API reads the live state: the stored state with the patch applied.
    assert _exactly(client.get(session_id).state) == _exactly(expected(5))
    victim.kill()
    (tmp_path / "hold").unlink()

    deployment.worker(AGENTS)
    wait_until(lambda: client.get(session_id).status == "completed", timeout=30, what="recovery")
    assert _exactly(client.get(session_id).state) == _exactly(expected(9))
    assert _row(client, session_id)[1] is None, "a completed session's patch is folded"
    for seq in range(1, 10):
        assert _exactly(client.checkpoint_state(session_id, seq).state) == _exactly(expected(seq))
    events = [e.type for e in client.events(session_id)]
    assert "lease_recovered" in events
    assert events.count("step_completed") == 9


def test_a_dead_letter_retry_patches_the_live_state_and_folds_the_pending_patch(
    client: Client, tmp_path: Path, deployment: LocalDeployment
) -> None:
    deployment.worker(AGENTS)
    flag = tmp_path / "flag"
    session_id = client.start("live_fragile", {"flag": str(flag)})
    wait_until(lambda: client.get(session_id).status == "failed", what="the dead letter")
    seq, patch = _row(client, session_id)
    assert seq == 3 and isinstance(patch, list) and patch, "steps 2-3 appended patches"
    assert (client.get(session_id).state or {}).get("notes") == [1, 2, 3]

    [letter] = client.dead_letters().items
    flag.touch()
    client.retry_dead_letter(
        letter.dead_letter_id,
        state_patch=[{"op": "add", "path": "/patched", "value": "by ops"}],
        actor="test",
    )
    wait_until(lambda: client.get(session_id).status == "completed", what="the retried session")
    assert client.get(session_id).result == {"notes": [1, 2, 3], "patched": "by ops"}
    assert _row(client, session_id)[1] is None
