"""JSON given on the command line (``--input``, ``--patch``, ``--payload``),
refused up front when PostgreSQL could not store it.

Valid JSON is not enough: PostgreSQL rejects ``\\u0000`` in ``jsonb`` and
``text``, psycopg cannot encode a lone surrogate (``"\\ud800"``, or a byte that
is not UTF-8 in ``argv``), and Python's parser gives up on deep nesting and
huge integers, and NaN or an overflowing number has no JSON text. Each is a
``click.UsageError`` naming the option and where
in the value the problem sits, before anything is written.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

import click

from resumable._internal.serialization import find_bad_value, read_float, unstorable_text
from resumable.services.arguments import MAX_IDEMPOTENCY_KEY_LENGTH


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
        decoded = json.loads(value, parse_float=read_float)
    except json.JSONDecodeError as exc:
        raise click.UsageError(f"{option} is not valid JSON: {exc}") from None
    except RecursionError:
        raise click.UsageError(f"{option} is nested too deeply") from None
    except ValueError as exc:  # an integer of more than 4,300 digits, a float that underflows
        raise click.UsageError(f"{option}: {exc}") from None
    problem = _find_bad_text(decoded, "$")
    if problem:
        raise click.UsageError(f"{option}: {problem}")
    # Deeper than the API stores (as an HTTP body is), or a number JSON has
    # no text for (NaN, 1e400 read as infinity): a bad argument too.
    stored = find_bad_value(decoded, "$")
    if stored:
        raise click.UsageError(f"{option} cannot be stored: {stored}")
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


class StoredText(click.ParamType):  # type: ignore[type-arg]
    """An option kept as text (who did it, a filter): refused (exit 2) when
    PostgreSQL could not store or compare it (a NUL, a byte that is not UTF-8)."""

    name = "text"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        problem = _bad_text(text)
        if problem:
            self.fail(problem, param, ctx)
        return text


class FiniteFloatRange(click.FloatRange):
    """click's FloatRange, which lets NaN through every bound check."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        converted = super().convert(value, param, ctx)
        if converted is not None and math.isnan(converted):
            self.fail("NaN is not a number of seconds or a rate", param, ctx)
        return converted


STORED_TEXT = StoredText()


def parse_key(value: str | None, option: str) -> str | None:
    """An idempotency key, bounded as the HTTP API bounds one: 1 to 256
    bytes of UTF-8, not all blank (an empty key would dedupe as a real one)."""
    parse_text(value, option)
    if value is not None and (
        not value.strip() or len(value.encode()) > MAX_IDEMPOTENCY_KEY_LENGTH
    ):
        raise click.UsageError(
            f"{option} must be 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} bytes (UTF-8), not blank"
        )
    return value


class RateRange(FiniteFloatRange):
    """A rate per second, written ``5`` or ``5/s`` (as the README writes it)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value.strip().endswith("/s"):
            value = value.strip().removesuffix("/s")
        return super().convert(value, param, ctx)


class UtcDateTime(click.DateTime):
    """A time as ``dlq list --since`` takes it: the plain forms, and RFC 3339
    with a ``Z`` or an offset (what the HTTP API's ``since`` takes).

    A time written without an offset is UTC, as the console reads it. Left
    naive, PostgreSQL would read it in its own TimeZone setting, and the CLI
    and the console would pick different dead letters from the same text.
    """

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        converted = super().convert(value, param, ctx)
        if isinstance(converted, datetime) and converted.tzinfo is None:
            return converted.replace(tzinfo=UTC)
        return converted


DATE_TIME = UtcDateTime(
    formats=[
        "%Y-%m-%d",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%dT%H:%M:%S%z",
        "%Y-%m-%dT%H:%M:%S.%f%z",
    ]
)
