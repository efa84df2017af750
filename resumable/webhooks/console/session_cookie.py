"""The console's login session: a signed cookie, and no server-side store.

The cookie is signed here with HMAC-SHA256 (no ``itsdangerous``) under a key
derived from the accepted API tokens (``RESUMABLE_API_TOKENS``, or the local
token when none is configured). So every web process of a deployment accepts
the cookies the others issued without another secret to configure, and
changing the tokens ends every console session at once. The cookie holds the
operator's name, the session's CSRF token and an expiry; it is ``HttpOnly``
(scripts cannot read it, so they cannot read the CSRF token either),
``SameSite=Strict`` (another site's form or link does not carry it) and
``Secure`` when the console is served over https.

A second, short-lived cookie carries the login form's own CSRF token, so the
login form is an action like the others.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from starlette.requests import HTTPConnection
from starlette.responses import Response

SESSION_COOKIE = "resumable_console"
LOGIN_COOKIE = "resumable_login"
# How long a console login lasts, and how long a login form stays usable.
SESSION_SECONDS = 12 * 3600
LOGIN_FORM_SECONDS = 3600
# The console's cookies are sent only to its own pages.
COOKIE_PATH = "/ui"
# Far above any cookie issued here; a longer one is not worth verifying.
_MAX_COOKIE_LENGTH = 4096


@dataclass(frozen=True)
class Operator:
    """Who is logged in: `name` goes into the audit log as ``console:<name>``."""

    name: str
    csrf: str

    @property
    def actor(self) -> str:
        return f"console:{self.name}"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class CookieSigner:
    """Signs and verifies the console's cookies."""

    def __init__(self, tokens: list[str]) -> None:
        material = "\n".join(sorted(t for t in tokens if t)).encode("utf-8", "surrogateescape")
        self._key = hmac.new(b"resumable console cookie v1", material, hashlib.sha256).digest()

    def _mac(self, body: str) -> str:
        return _b64(hmac.new(self._key, body.encode(), hashlib.sha256).digest())

    def sign(self, kind: str, payload: dict[str, Any], seconds: int) -> str:
        document = {**payload, "kind": kind, "exp": int(time.time()) + seconds}
        body = _b64(json.dumps(document, separators=(",", ":")).encode())
        return f"{body}.{self._mac(body)}"

    def verify(self, kind: str, value: str | None) -> dict[str, Any] | None:
        """The payload of a cookie this deployment signed for `kind`, unexpired; else None."""
        if not value or len(value) > _MAX_COOKIE_LENGTH or not value.isascii():
            return None
        body, _, mac = value.rpartition(".")
        if not body or not hmac.compare_digest(mac.encode(), self._mac(body).encode()):
            return None
        try:
            document = json.loads(_unb64(body))
        except (ValueError, binascii.Error):
            return None
        if not isinstance(document, dict) or document.get("kind") != kind:
            return None
        expires = document.get("exp")
        if not isinstance(expires, int) or expires < time.time():
            return None
        return document

    def operator(self, conn: HTTPConnection) -> Operator | None:
        document = self.verify("session", conn.cookies.get(SESSION_COOKIE))
        if document is None:
            return None
        name, csrf = document.get("name"), document.get("csrf")
        if not isinstance(name, str) or not isinstance(csrf, str) or not name or not csrf:
            return None
        return Operator(name, csrf)

    def log_in(self, response: Response, conn: HTTPConnection, name: str) -> None:
        value = self.sign("session", {"name": name, "csrf": new_csrf_token()}, SESSION_SECONDS)
        _set(response, conn, SESSION_COOKIE, value, SESSION_SECONDS)
        response.delete_cookie(LOGIN_COOKIE, path=COOKIE_PATH)

    def remember_login_csrf(self, response: Response, conn: HTTPConnection, token: str) -> None:
        """The login form's CSRF token, kept in its own short-lived cookie."""
        value = self.sign("login", {"csrf": token}, LOGIN_FORM_SECONDS)
        _set(response, conn, LOGIN_COOKIE, value, LOGIN_FORM_SECONDS)

    def login_csrf(self, conn: HTTPConnection) -> str | None:
        document = self.verify("login", conn.cookies.get(LOGIN_COOKIE))
        token = None if document is None else document.get("csrf")
        return token if isinstance(token, str) and token else None


def log_out(response: Response) -> None:
    response.delete_cookie(SESSION_COOKIE, path=COOKIE_PATH)


def new_csrf_token() -> str:
    return secrets.token_urlsafe(32)


def _set(response: Response, conn: HTTPConnection, name: str, value: str, seconds: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=seconds,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=conn.url.scheme == "https",
    )
