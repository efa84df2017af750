"""Keeping secrets out of the history.

The live state on the session row keeps everything the agent put there (its
next step may need an API key). Everything written for the record is
redacted first: checkpoint states, deltas and events; tool-call requests and
responses in the cache; audit payloads; error messages and tracebacks on
dead letters. A value is redacted when its key matches a configured name
(``RESUMABLE_REDACT_KEYS``; a key matches a name when it equals it, or ends
with ``_`` plus it, ignoring case and ``-``); and any secret value found that
way is also scrubbed from free text (an error message that quotes it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

REDACTED = "[REDACTED]"

DEFAULT_KEYS = (
    "api_key",
    "apikey",
    "token",
    "secret",
    "password",
    "passwd",
    "authorization",
    "cookie",
    "private_key",
    "credential",
    "credentials",
)

_MAX_VERDICTS = 10_000  # keys remembered per redactor (dict keys that are data stay bounded)
_MIN_SCRUB_LENGTH = 6  # shorter "secrets" would scrub ordinary words out of messages


class Redactor:
    def __init__(self, keys: Iterable[str] = DEFAULT_KEYS) -> None:
        self._names = tuple(_normal(k) for k in keys if k.strip())
        self._verdicts: dict[str, bool] = {}
        # A secret key ends with a name and then the closing quote in JSON.
        self._needles = tuple(
            {f'{name}"' for name in self._names}
            | {f'{name.replace("_", "-")}"' for name in self._names}
        )

    def might_match(self, encoded: str) -> bool:
        """False when no key in this JSON text can be secret: a substring scan
        in C that spares walking a large state on every step."""
        lowered = encoded.lower()
        return any(needle in lowered for needle in self._needles)

    def is_secret_key(self, key: str) -> bool:
        # A state repeats the same few keys thousands of times: decide each once.
        known = self._verdicts.get(key)
        if known is None:
            normal = _normal(key)
            known = any(normal == name or normal.endswith("_" + name) for name in self._names)
            if len(self._verdicts) < _MAX_VERDICTS:
                self._verdicts[key] = known
        return known

    def redact(self, value: Any, found: set[str] | None = None) -> Any:
        """A copy of `value` with secret keys' values replaced (the same object
        when nothing matched, so the common case copies nothing). Secret string
        values are added to `found`."""
        if isinstance(value, dict):
            out: dict[str, Any] | None = None
            for key, item in value.items():
                if isinstance(key, str) and self.is_secret_key(key):
                    new: Any = REDACTED
                    _collect(item, found)
                else:
                    new = self.redact(item, found)
                if new is not item:
                    if out is None:
                        out = dict(value)
                    out[key] = new
            return value if out is None else out
        if isinstance(value, list):
            items = [self.redact(item, found) for item in value]
            changed = any(a is not b for a, b in zip(items, value, strict=True))
            return items if changed else value
        return value

    def redact_patch(
        self, patch: list[dict[str, Any]], found: set[str] | None = None
    ) -> list[dict[str, Any]]:
        """The JSON Patch `patch` (between two live states) as it applies to
        their redacted copies: values redacted, and an operation inside a
        secret key's value becomes one replacing that value with the marker.
        Proportional to the patch, not to the state it applies to; `patch`
        itself when nothing in it is secret."""
        out: list[dict[str, Any]] = []
        marked: set[str] = set()
        changed = False
        for original in patch:
            op = original
            tokens = op["path"].split("/")[1:]
            secret = next(
                (i for i, token in enumerate(tokens) if self.is_secret_key(_unescape(token))),
                None,
            )
            if secret is None:
                if "value" in op:
                    value = self.redact(op["value"], found)
                    if value is not original["value"]:
                        op, changed = {**original, "value": value}, True
                out.append(op)
                continue
            changed = True
            _collect(op.get("value"), found)
            if secret == len(tokens) - 1:
                out.append(op if op["op"] == "remove" else {**op, "value": REDACTED})
                continue
            # Inside a secret: the history holds the marker there already.
            path = "/" + "/".join(tokens[: secret + 1])
            if path not in marked:
                marked.add(path)
                out.append({"op": "replace", "path": path, "value": REDACTED})
        return out if changed else patch

    @staticmethod
    def scrub(text: str | None, secrets: Iterable[str]) -> str | None:
        """Remove known secret values from free text."""
        if not text:
            return text
        for secret in sorted(set(secrets), key=len, reverse=True):
            if len(secret) >= _MIN_SCRUB_LENGTH:
                text = text.replace(secret, REDACTED)
        return text


def _collect(value: Any, found: set[str] | None) -> None:
    if found is None:
        return
    if isinstance(value, str):
        found.add(value)
    elif isinstance(value, dict):
        for item in value.values():
            _collect(item, found)
    elif isinstance(value, list):
        for item in value:
            _collect(item, found)


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _normal(key: str) -> str:
    return key.strip().lower().replace("-", "_")
