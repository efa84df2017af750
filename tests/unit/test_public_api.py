"""What the README imports from ``resumable`` is there, in a fresh interpreter."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

import resumable
from resumable import schemas


def test_the_issue_import_line_works_in_a_fresh_interpreter() -> None:
    line = (
        "from resumable import RetryPolicy, TransientError, PermanentError, Snapshot, "
        "Incremental, EventSourced, Client, AsyncClient"
    )
    ran = subprocess.run(
        [sys.executable, "-c", line], capture_output=True, text=True, check=False, timeout=60
    )
    assert ran.returncode == 0, ran.stderr


def test_everything_in_all_is_importable_and_the_records_are_the_schemas_ones() -> None:
    missing = [name for name in resumable.__all__ if not hasattr(resumable, name)]
    assert missing == []
    for name in ("Session", "Event", "Checkpoint", "DeadLetter", "Delivery", "Page"):
        assert name in resumable.__all__
        assert getattr(resumable, name) is getattr(schemas, name)


def test_records_are_frozen_and_carry_no_lease_internals() -> None:
    fields = set(schemas.Session.model_fields)
    assert {"session_id", "step", "seq"} <= fields
    assert not {"id", "cursor", "step_seq", "lease_owner", "lease_epoch"} & fields
    event = schemas.Event(
        event_id=1,
        session_id="3f1c9b7e-8d2a-4c51-9a0e-6b7f2d9c1e45",
        seq=None,
        step=None,
        type="session_created",
        payload={},
        at="2026-11-01T09:00:00Z",
    )
    with pytest.raises(ValueError, match="frozen"):
        event.type = "changed"  # type: ignore[misc]


def test_the_async_client_has_every_public_method_of_the_client() -> None:
    # README: "AsyncClient has the same methods, awaited". `close` is `aclose`
    # there; `session_row` is internal (its docstring says so). Properties
    # (`Client.broker`) are parts, not calls: the wrapped client has them.
    from resumable import AsyncClient, Client

    def public(cls: type) -> set[str]:
        return {
            name
            for name, value in vars(cls).items()
            if not name.startswith("_") and not isinstance(value, property)
        }

    missing = public(Client) - public(AsyncClient) - {"close", "session_row"}
    assert missing == set(), f"AsyncClient lacks {sorted(missing)}"
    for name in public(Client) & public(AsyncClient):
        if callable(getattr(Client, name)) and name != "from_env":
            assert inspect.iscoroutinefunction(getattr(AsyncClient, name)), name


def test_the_errors_readme_names_are_exported_and_bad_arguments_are_value_errors() -> None:
    """README lists each error Python callers meet; every one is importable
    from `resumable`, and a bad argument of any kind is an InvalidArgumentError
    (a ValueError): a patch that does not apply, a cursor not handed out."""
    from resumable.services.state_patch import apply_state_patch
    from resumable.webhooks.params import number_cursor

    for name in (
        "InvalidPatchError",
        "InvalidCursorError",
        "ReducerNotLoadedError",
        "UnstorableArgumentError",
    ):
        assert name in resumable.__all__ and hasattr(resumable, name), name
    with pytest.raises(resumable.InvalidPatchError) as patch_error:
        apply_state_patch({}, [{"op": "remove", "path": "/nope"}])
    with pytest.raises(resumable.InvalidCursorError) as cursor_error:
        number_cursor("not-ours", 100)
    for raised in (patch_error.value, cursor_error.value):
        assert isinstance(raised, resumable.InvalidArgumentError) and isinstance(raised, ValueError)
