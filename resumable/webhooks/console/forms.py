"""Reading the console's HTML forms: CSRF first, then each field with one clear error.

Every console action reads its fields through ``action_form``, which refuses
the request (403) unless it carries the session's CSRF token, so a handler
cannot read input from a forged form. Fields are URL-encoded text; NUL (which
PostgreSQL refuses), bad UTF-8, oversized values, malformed JSON and
non-patches are refused as ``FormError`` with a message for the page, before
anything is written. JSON fields go through the API's own parser
(``webhooks/bodies.py``), so the console refuses exactly what the API refuses.
"""

from __future__ import annotations

import hmac
import re
from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request

from resumable.webhooks.bodies import parse_json
from resumable.webhooks.errors import ApiError

# More than any console form has; parse_qsl stops counting past it.
MAX_FIELDS = 40
# The longest reason, name or filter text (the API's own bound for reasons).
MAX_TEXT = 2000
# The longest JSON value typed into a form (a signal payload, a patch).
MAX_JSON_CHARS = 256 * 1024

_FORM_TYPE = "application/x-www-form-urlencoded"


class FormError(Exception):
    """A field (or the whole form) that cannot be used, and why, for the page."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class CsrfError(Exception):
    """The form did not carry this session's CSRF token: nothing is done."""


class Form:
    """The fields of one submitted form, read with validation."""

    def __init__(self, fields: dict[str, str]) -> None:
        self.fields = fields

    def raw(self, name: str) -> str:
        return self.fields.get(name, "")

    def text(
        self,
        name: str,
        label: str,
        *,
        required: bool = False,
        max_length: int = MAX_TEXT,
        pattern: re.Pattern[str] | None = None,
        hint: str = "",
    ) -> str | None:
        value = self.fields.get(name, "").strip()
        if not value:
            if required:
                raise FormError(f"{label} is required")
            return None
        if len(value) > max_length:
            raise FormError(f"{label} is too long ({len(value)} characters; at most {max_length})")
        if pattern is not None and not pattern.fullmatch(value):
            raise FormError(f"{label} is not valid{': ' + hint if hint else ''}")
        return value

    def json(self, name: str, label: str, *, required: bool = False) -> Any:
        text = self.fields.get(name, "")
        if not text.strip():
            if required:
                raise FormError(f"{label} is required (JSON; null for nothing)")
            return None
        if len(text) > MAX_JSON_CHARS:
            raise FormError(
                f"{label} is too long ({len(text)} characters; at most {MAX_JSON_CHARS})"
            )
        try:
            return parse_json(text.encode("utf-8"))
        except ApiError as exc:
            message = exc.message.replace("request body", label)
            raise FormError(f"{label}: {message}" if label not in message else message) from None

    def patch(self, name: str, label: str = "the JSON Patch") -> list[dict[str, Any]] | None:
        value = self.json(name, label)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(op, dict) for op in value):
            raise FormError(
                f"{label} must be a JSON list of operations, like "
                '[{"op": "replace", "path": "/key", "value": 1}]'
            )
        return value or None

    def integer(self, name: str, label: str, low: int, high: int) -> int | None:
        value = self.fields.get(name, "").strip()
        if not value:
            return None
        # Bounded before int() (a 50,000-digit field; int() counts leading
        # zeros too), but as long as `high` allows: a cursor or an event id
        # runs to 19 digits.
        digits = value.lstrip("0") or "0"
        if not (value.isascii() and value.isdigit() and len(digits) <= len(str(high))):
            raise FormError(f"{label} must be a whole number from {low} to {high}")
        number = int(digits)
        if not low <= number <= high:
            raise FormError(f"{label} must be a whole number from {low} to {high}")
        return number

    def number(self, name: str, label: str, low: float, high: float) -> float | None:
        value = self.fields.get(name, "").strip()
        if not value:
            return None
        try:
            if len(value) > 30:
                raise ValueError(value)
            number = float(value)
        except ValueError:
            number = float("nan")
        if not low <= number <= high:  # also refuses NaN
            raise FormError(f"{label} must be a number from {low:g} to {high:g}")
        return number

    def flag(self, name: str) -> bool:
        return self.fields.get(name, "") in ("on", "true", "1", "yes")


async def read_form(request: Request) -> Form:
    """The URL-encoded body's fields (the app bounds its size, answering 413)."""
    body = await request.body()
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if body and media_type != _FORM_TYPE:
        raise FormError(f"expected a form ({_FORM_TYPE}), got {media_type[:60] or 'none'!r}", 415)
    try:
        text = body.decode("utf-8")
        pairs = parse_qsl(text, keep_blank_values=True, max_num_fields=MAX_FIELDS, errors="strict")
    except UnicodeDecodeError:
        raise FormError("the form is not UTF-8", 400) from None
    except ValueError:
        raise FormError(f"the form has more than {MAX_FIELDS} fields", 400) from None
    fields: dict[str, str] = {}
    for name, value in pairs:
        if "\x00" in name or "\x00" in value:
            raise FormError("form fields may not contain NUL characters", 400)
        if name in fields:
            raise FormError(f"the form has the field {name[:40]!r} twice", 400)
        fields[name] = value.replace("\r\n", "\n")
    return Form(fields)


def check_csrf(form: Form, expected: str | None) -> None:
    given = form.raw("csrf").encode("utf-8", "surrogateescape")
    if not expected or not hmac.compare_digest(given, expected.encode()):
        raise CsrfError()


async def action_form(request: Request) -> Form:
    """The form of a console action, once its CSRF token is checked (a form
    that cannot be read at all is a FormError: nothing is done either way)."""
    form = await read_form(request)
    check_csrf(form, request.user.operator.csrf)
    return form
