"""Which processes ``resumable dev`` runs: those of the Procfile in the current
directory, or the built-in web, worker and scheduler when there is none.

The Procfile is read with honcho's parser, so a line means here what it means
to honcho, foreman and Heroku. ``release:`` is skipped because ``dev`` applies
the migrations itself before anything else starts. A command that starts with
``resumable`` is run as ``<this python> -m resumable.cli``, so the children
run the same installation as ``dev`` whatever ``PATH`` says (a virtualenv's
``bin`` is often not on it when ``.venv/bin/resumable dev`` is typed). A
simple command is run with the shell's ``exec``, so the program itself gets
the signals and reports its own exit status (Debian's ``dash`` otherwise stays
in between as the parent).
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from honcho.environ import parse_procfile

from resumable.errors import ConfigurationError

# Run once by `dev` itself before the processes start.
SKIPPED = frozenset({"release"})

BUILTIN = {
    "web": "resumable web",
    "worker": "resumable worker",
    "scheduler": "resumable scheduler",
}

_RESUMABLE = re.compile(r"^resumable(?=\s|$)")
_OPERATOR_CHARS = frozenset("();<>|&")
_COMPOUND_WORDS = frozenset(
    {"!", "{", "[[", "if", "for", "while", "until", "case", "select", "function", "exec"}
)


@dataclass(frozen=True)
class ProcessSpec:
    """One process to run: its Procfile name and its shell command line."""

    name: str
    command: str


@dataclass(frozen=True)
class Processes:
    """What to run, and where it was read from (None: the built-in commands)."""

    specs: list[ProcessSpec]
    procfile: Path | None


def resolve_command(command: str, python: str = sys.executable) -> str:
    """``resumable X`` becomes ``<python> -m resumable.cli X``; others are left alone."""
    prefix = f"{shlex.quote(python)} -m resumable.cli"
    # A function, not a template: a Windows-style path's backslashes are not escapes.
    return _RESUMABLE.sub(lambda _match: prefix, command.strip(), count=1)


def exec_form(command: str) -> str:
    """``exec COMMAND`` if COMMAND is one simple command; anything else unchanged.

    Pipelines, lists, compound commands and leading variable assignments keep
    their shell (they still stop together: the whole process group is signalled).
    """
    try:
        tokens = list(shlex.shlex(command, posix=True, punctuation_chars=True))
    except ValueError:  # unbalanced quotes: let the shell say so
        return command
    if not tokens or tokens[0] in _COMPOUND_WORDS or "=" in tokens[0]:
        return command
    if any(set(token) <= _OPERATOR_CHARS for token in tokens):
        return command
    return f"exec {command}"


def load_processes(directory: Path, python: str = sys.executable) -> Processes:
    """The processes of ``directory/Procfile`` (or the built-in ones), resolved."""
    path = directory / "Procfile"
    if path.is_file():
        try:
            entries = dict(parse_procfile(path.read_text()).processes)
        except AssertionError:  # honcho's way of saying a name appears twice
            raise ConfigurationError(f"{path} names a process twice") from None
        source: Path | None = path
    else:
        entries, source = dict(BUILTIN), None
    specs = [
        ProcessSpec(name, exec_form(resolve_command(command, python)))
        for name, command in entries.items()
        if name not in SKIPPED
    ]
    if not specs:
        raise ConfigurationError(f"{path} names no process to run (besides release)")
    return Processes(specs, source)
