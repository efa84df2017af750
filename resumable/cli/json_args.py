"""JSON given on the command line (``--input``, ``--patch``, ``--payload``),
refused up front when PostgreSQL could not store it.

Valid JSON is not enough: PostgreSQL rejects ``\\u0000`` in ``jsonb`` and
``text``, psycopg cannot encode a lone surrogate (``"\\ud800"``, or a byte that
is not UTF-8 in ``argv``), and Python's parser gives up on deep nesting and
huge integers. Each is a ``click.UsageError`` naming the option and where
in the value the problem sits, before anything is written.
"""

from __future__ import annotations

import json
from typing import Any

import click

from resumable.serialization import unstorable_text


def _bad_text(text: str) -> str | None:
    problem = unstorable_text(text)
    return f"contains {problem}" if problem else None


def _find_bad_text(value: Any, path: str) -> str | None:
    """The first string or key PostgreSQL would refuse, with its path."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            problem = _bad_text(item)
            if problem:
                return f"{where} {problem}"
        elif isinstance(item, list):
            stack.extend((child, f"{where}[{index}]") for index, child in enumerate(item))
        elif isinstance(item, dict):
            for key, child in item.items():
                problem = _bad_text(key)
                if problem:
                    return f"a key in {where} {problem}"
                stack.append((child, f"{where}.{key}"))
    return None


def parse_json(value: str | None, option: str) -> Any:
    """`value` decoded, or None when the option was not given."""
    if value is None:
        return None
    try:
        decoded = json.loads(value)
    except json.JSONDecodeError as exc:
        raise click.UsageError(f"{option} is not valid JSON: {exc}") from None
    except RecursionError:
        raise click.UsageError(f"{option} is nested too deeply") from None
    except ValueError as exc:  # an integer of more than 4,300 digits
        raise click.UsageError(f"{option}: {exc}") from None
    problem = _find_bad_text(decoded, "$")
    if problem:
        raise click.UsageError(f"{option}: {problem}")
    return decoded


def parse_text(value: str | None, option: str, *, max_length: int | None = None) -> str | None:
    """A free-text option stored as it is (a reason, an idempotency key)."""
    if value is None:
        return None
    problem = _bad_text(value)
    if problem:
        raise click.UsageError(f"{option} {problem}")
    if max_length is not None and len(value.encode()) > max_length:
        raise click.UsageError(f"{option} is longer than {max_length} bytes")
    return value


def parse_patch(value: str | None, option: str = "--patch") -> list[dict[str, Any]] | None:
    """An RFC 6902 JSON Patch: a JSON array of operations."""
    patch = parse_json(value, option)
    if patch is not None and not isinstance(patch, list):
        raise click.UsageError(f"{option} must be a JSON array of operations")
    return patch
