"""The home directory (``RESUMABLE_HOME``): created the same way by every
process that writes under it first.

The embedded servers, ``resumable dev``'s lock and the web process's local
API token each may be the first to write there. A home made by a plain
``mkdir`` gets the umask's mode (0755, world-listable), and since an
existing home keeps its mode, it would stay that way for good."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from resumable.errors import ConfigurationError


class HomeNotUsableError(ConfigurationError):
    """RESUMABLE_HOME is not a directory this process can write to."""


def make_home(home: Path) -> None:
    """Create the home (parents as ``mkdir -p`` would) private to its owner;
    as root, searchable by others (0711) so the PostgreSQL OS user can reach
    its data directory below. An existing home keeps its mode."""
    mode = 0o711 if os.geteuid() == 0 else 0o700
    try:
        home.mkdir(parents=True, exist_ok=True, mode=mode)
        if not home.is_dir():
            raise NotADirectoryError(20, "Not a directory", str(home))
        probe = home / f".write-test-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise HomeNotUsableError(
            f"RESUMABLE_HOME {home} is not a writable directory ({why})"
        ) from None


def local_token(home: Path) -> str:
    """The token used when none is configured: made once, kept under the home
    directory, so local processes (`resumable dev`, the CLI) agree on it."""
    path = home / "api-token"
    if path.exists():
        return path.read_text().strip()
    make_home(home)
    token = secrets.token_urlsafe(32)
    path.touch(mode=0o600)
    path.write_text(token)
    return token
