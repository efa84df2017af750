"""Rendering console pages: Jinja2 with autoescaping, and JSON shown as inert text.

Every value in a page came from somewhere an attacker may reach (agent state,
tool results, callback payloads, error messages), so nothing is marked safe
by hand: templates are autoescaped and never use ``|safe`` on data, and the
one filter that builds HTML (``json_html``, for pretty JSON) builds it only
from ``markupsafe.escape``d pieces. A string becomes a link only when it is
an ``http(s)://`` URL (never ``javascript:`` or ``data:``), and such links
open without a referrer, so a callback URL in a page is not leaked by a click.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.templating import Jinja2Templates

from resumable.services import narration
from resumable.services.narration import duration

# Pretty JSON longer than this is shown as plain (still escaped) text, cut here.
MAX_RENDERED_JSON = 512 * 1024
# Deeper than this, the rest of a value is shown as compact JSON text.
MAX_PRETTY_DEPTH = 40
MAX_LINK_LENGTH = 2048

_HTTP_URL = re.compile(r"https?://[^\s\"'<>`\\]+", re.IGNORECASE)
# Invisible characters that reorder or hide text (bidi overrides, zero-width):
# shown as \u escapes so a value cannot disguise itself on the page.
_INVISIBLE = re.compile("[\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def http_url(value: Any) -> str | None:
    """`value` if it is an http(s) URL that is safe to put in an href, else None."""
    if isinstance(value, str) and len(value) <= MAX_LINK_LENGTH and _HTTP_URL.fullmatch(value):
        return value
    return None


def visible(text: Any) -> str:
    """`text` with characters that hide or reorder text shown as \\u escapes."""
    if text is None:
        return ""
    return _INVISIBLE.sub(lambda m: f"\\u{ord(m.group()):04x}", str(text))


def _string(value: str) -> str:
    """A JSON string as HTML, escaped here (the caller marks the whole safe once)."""
    shown = escape(visible(json.dumps(value, ensure_ascii=False)))
    url = http_url(value)
    if url is None:
        return f'<span class="js">{shown}</span>'
    return f'<a href="{escape(url)}" rel="noopener noreferrer nofollow" target="_blank">{shown}</a>'


def _pretty(value: Any, depth: int, out: list[str]) -> None:
    """Escaped HTML pieces of `value`: every piece of data goes through
    ``escape``, the markup around it is constant. Plain strings, marked safe
    once for the whole value: a ``Markup.format`` per token was 60% of
    rendering a 1.2 MB session page (215 ms, 84 ms without)."""
    if depth > MAX_PRETTY_DEPTH:
        out.append(escape(visible(json.dumps(value, ensure_ascii=False))))
    elif isinstance(value, dict) and value:
        pad, last = "  " * (depth + 1), len(value) - 1
        out.append("{\n")
        for index, (key, item) in enumerate(value.items()):
            out.append(f'{pad}<span class="jk">{escape(visible(json.dumps(key)))}</span>: ')
            _pretty(item, depth + 1, out)
            out.append(",\n" if index < last else "\n")
        out.append("  " * depth + "}")
    elif isinstance(value, list) and value:
        pad, last = "  " * (depth + 1), len(value) - 1
        out.append("[\n")
        for index, item in enumerate(value):
            out.append(pad)
            _pretty(item, depth + 1, out)
            out.append(",\n" if index < last else "\n")
        out.append("  " * depth + "]")
    elif isinstance(value, str):
        out.append(_string(value))
    else:
        out.append(escape(json.dumps(value)))


def json_html(value: Any) -> Markup:
    """`value` as indented JSON inside <pre>, every piece escaped."""
    compact = json.dumps(value, ensure_ascii=False)
    if len(compact) > MAX_RENDERED_JSON:
        cut = escape(visible(compact[:MAX_RENDERED_JSON]))
        return Markup(
            '<pre class="json">{}</pre><p class="note">Cut at {} of {} characters; '
            "the API returns the whole value.</p>"
        ).format(cut, MAX_RENDERED_JSON, len(compact))
    out: list[str] = []
    _pretty(value, 0, out)
    return Markup('<pre class="json">' + "".join(out) + "</pre>")


def when(value: datetime | str | None) -> str:
    """A timestamp in UTC, to the second."""
    if value is None:
        return "-"
    moment = value
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            return value
    assert isinstance(moment, datetime)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    except OverflowError:  # before year 1 or after 9999 in UTC: as it was written
        return moment.isoformat()


def ago(value: datetime | None) -> str:
    """How long before now, as the CLI says it ("3 min ago", "in 2 h")."""
    return "" if value is None else narration.ago(value)


def clock(value: datetime) -> str:
    """A timestamp to the millisecond (most events of a run share a second)."""
    moment = value if value.tzinfo else value.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


# The longest one-line summary of an event's payload (the whole is one click away).
SUMMARY_LENGTH = 80


def summary(payload: Any) -> str:
    """An event's payload on one line, its first keys and short values:
    ``ms=0.333, next=gathered, tool_calls=0``."""
    if not isinstance(payload, dict):
        return visible(json.dumps(payload, ensure_ascii=False))[:SUMMARY_LENGTH]
    parts = []
    for key, value in payload.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        parts.append(f"{key}={text if len(text) <= 24 else text[:23] + '…'}")
    line = visible(", ".join(parts))
    return line if len(line) <= SUMMARY_LENGTH else line[: SUMMARY_LENGTH - 1] + "…"


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("resumable.webhooks.console", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["json_html"] = json_html
    env.filters["http_url"] = http_url
    env.filters["visible"] = visible
    env.filters["when"] = when
    env.filters["ago"] = ago
    env.filters["clock"] = clock
    env.filters["summary"] = summary
    env.filters["span"] = duration
    return env


templates = Jinja2Templates(env=_environment())


def page(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """A console page. Every page knows who is logged in and their CSRF token."""
    user = request.scope.get("user")
    operator = getattr(user, "operator", None)
    context.setdefault("operator", operator)
    context.setdefault("csrf", operator.csrf if operator else "")
    context.setdefault("error", None)
    context.setdefault("notice", None)
    response: HTMLResponse = templates.TemplateResponse(
        request, template, context, status_code=status
    )
    return response
