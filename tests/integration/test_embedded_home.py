"""The embedded servers' home on disk: created private, and, as root, only
the search permission PostgreSQL's OS user needs is added where it lacks it
(the library alone makes every parent up to / readable by everyone)."""

from __future__ import annotations

import logging
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from resumable._internal.database_urls import libpq_url
from resumable._internal.embedded import POSTGRES_OS_USER, EmbeddedServices
from resumable._internal.home import local_token
from resumable.dev.home_lock import dev_lock
from resumable.errors import ConfigurationError


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def base() -> Iterator[Path]:
    """A private directory under /tmp (short, for unix socket paths)."""
    made = Path(tempfile.mkdtemp(dir="/tmp", prefix="rth-"))
    try:
        yield made
    finally:
        home = made / "team" / "home"
        if home.exists():
            EmbeddedServices(home).stop()
        shutil.rmtree(made, ignore_errors=True)


def test_home_is_created_private_and_parents_get_only_what_postgres_needs(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (base / "team").mkdir(mode=0o750)
    os.chmod(base / "team", 0o750)  # whatever the umask
    assert _mode(base) == 0o700
    home = base / "team" / "home"
    before = {p: _mode(p) for p in base.parents}

    services = EmbeddedServices(home)
    with caplog.at_level(logging.INFO, logger="resumable._internal.embedded"):
        urls = services.acquire()
    try:
        with psycopg.connect(libpq_url(urls.database_url), connect_timeout=5) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        services.release()

    assert {p: _mode(p) for p in base.parents} == before, "nothing above the base changed"
    notes = [r.getMessage() for r in caplog.records if "search permission" in r.getMessage()]
    if os.geteuid() != 0:
        assert _mode(home) == 0o700
        assert (_mode(base), _mode(base / "team")) == (0o700, 0o750)
        assert notes == []
        return
    # As root the server runs as another OS user (with root's groups, as the
    # library starts it): the home is searchable, and the one parent that
    # blocked it got group search only, said in one line.
    assert _mode(home) == 0o711
    assert _mode(base / "team") == 0o750, "already searchable: left alone"
    assert _mode(base) == 0o710
    assert (home / "postgres").owner() == POSTGRES_OS_USER
    assert notes == [
        f"running as root: PostgreSQL runs as OS user {POSTGRES_OS_USER}, which could not "
        f"enter {base}; added search permission (x, not read) there"
    ]


def _dev_lock(home: Path) -> None:
    with dev_lock(home):
        pass


@pytest.mark.parametrize(
    "first_writer",
    [_dev_lock, local_token, lambda home: EmbeddedServices(home).stop()],
    ids=["resumable dev's lock", "the web's local API token", "resumable services stop"],
)
def test_a_home_first_written_by_any_process_is_created_private(
    base: Path, first_writer: Callable[[Path], object]
) -> None:
    # Each made it with a plain mkdir (0755 under the usual umask), and an
    # existing home keeps its mode: world-listable for good.
    home = base / "team" / "home"
    first_writer(home)
    assert _mode(home) == (0o711 if os.geteuid() == 0 else 0o700)


def test_a_home_that_is_a_file_is_refused_naming_the_setting(base: Path) -> None:
    home = base / "home"
    home.write_text("not a directory")
    with pytest.raises(ConfigurationError, match=r"RESUMABLE_HOME .* is not a writable directory"):
        local_token(home)
