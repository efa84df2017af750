"""What a one-shot command loads before it does anything.

Every ``resumable`` command is a new interpreter, and imports were 95% of a
``sessions list``: the root group loaded every command's module (the web app,
the broker, Alembic) before it knew which command ran. These tests pin the
start-up down by what is imported, not by a timing that a loaded machine
would break: each heavy library named here costs a command 0.1-0.4 s.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import resumable

HEAVY = (
    "alembic",
    "apscheduler",
    "dramatiq",
    "psycopg",
    "redis",
    "sqlalchemy",
    "sqlmodel",
    "starlette",
)


def _loaded_after(code: str) -> set[str]:
    """The heavy top-level packages a fresh interpreter holds after `code`."""
    listing = "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    probe = f"{code}\nimport json, sys\n{listing}"
    ran = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return set(json.loads(ran.stdout.splitlines()[-1])) & set(HEAVY)


def test_the_root_group_loads_no_driver_broker_or_web_stack() -> None:
    assert _loaded_after("import resumable.cli.main") == set()


def test_the_error_messages_and_the_settings_load_no_server_library() -> None:
    assert _loaded_after("import resumable.errors, resumable.settings") == set()


@pytest.mark.parametrize("module", ["sessions", "dlq", "shared", "services", "db"])
def test_a_one_shot_command_loads_neither_alembic_nor_the_web_stack(module: str) -> None:
    loaded = _loaded_after(f"import resumable.cli.{module}")
    assert not loaded & {"alembic", "apscheduler", "starlette"}


@pytest.mark.parametrize(
    "module",
    ["resumable.cli.sessions", "resumable.cli.dlq", "resumable.cli.shared", "resumable.client"],
)
def test_commands_and_the_client_load_the_broker_only_to_send(module: str) -> None:
    """dramatiq and redis-py (with the OpenTelemetry SDK redis-py pulls in)
    were 0.2 s of a ``sessions list``, which sends nothing: they load on the
    first send (``broker/messages.py``, ``Client.broker``)."""
    assert not _loaded_after(f"import {module}") & {"dramatiq", "redis"}


def test_the_schema_check_knows_the_revisions_without_alembic() -> None:
    loaded = _loaded_after(
        "from resumable.models import migrate\nhead, known = migrate.known_revisions()"
    )
    assert "alembic" not in loaded


@pytest.mark.parametrize(
    "module",
    [
        "resumable.queue.worker",
        "resumable.scheduler.process",
        "resumable.client",
        "resumable.cli.sessions",
    ],
)
def test_processes_and_commands_that_read_no_table_rows_load_no_table_classes(
    module: str,
) -> None:
    """A worker and a scheduler only run statements, and ``enqueue`` only
    starts a session: SQLModel and the ORM (0.2 s of CPU a process, and their
    memory in every worker child) load only for a read of whole table rows."""
    assert "sqlmodel" not in _loaded_after(f"import {module}")


def test_the_models_package_names_resolve_on_first_use() -> None:
    from resumable import models

    assert set(models._HOMES) == set(models.__all__)
    for name, home in models._HOMES.items():
        module = __import__(home, fromlist=[name])
        assert getattr(models, name) is getattr(module, name), name
    with pytest.raises(AttributeError, match="no_such_thing"):
        models.no_such_thing  # noqa: B018


def test_every_public_name_has_a_home_and_resolves_there() -> None:
    """The package imports its names on first use; each must be where the
    table says, and the table must list exactly what ``__all__`` exports."""
    homes = resumable._HOMES
    assert set(homes) == set(resumable.__all__)
    for name, home in homes.items():
        module = __import__(home, fromlist=[name])
        assert getattr(resumable, name) is getattr(module, name), name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_thing"):
        resumable.no_such_thing  # noqa: B018


def test_star_import_gives_every_public_name() -> None:
    names: dict[str, object] = {}
    exec("from resumable import *", names)
    assert set(resumable.__all__) <= set(names)
