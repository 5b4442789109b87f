"""Who may act from the console, and proof that a form came from the console itself.

Reading needs nothing; acting needs a credential from `SCHEDULER_CONSOLE_AUTH`:
comma-separated `NAME:SECRET` pairs. A browser signs in with HTTP basic auth (user
NAME, password SECRET); a script sends `Authorization: Bearer SECRET`. A SECRET may be
given hashed, as werkzeug's `generate_password_hash` writes it (`scrypt:…`, `pbkdf2:…`).
With no credential configured the console is read-only.

A deployment behind an authenticating proxy may name the person with a header
(`SCHEDULER_CONSOLE_USER_HEADER=X-Forwarded-User`); it is believed only on a request
that also carries one of the credentials (the proxy's own), so a client that reaches
the console around the proxy cannot claim a name.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from werkzeug.security import check_password_hash

from scheduler.errors import UserError

AUTH_VARIABLE = "SCHEDULER_CONSOLE_AUTH"
USER_HEADER_VARIABLE = "SCHEDULER_CONSOLE_USER_HEADER"
_HASH_PREFIXES = ("scrypt:", "pbkdf2:")


class Via(Enum):
    BASIC = "basic"  # a browser: sent by itself on every request, so forms need a token
    BEARER = "bearer"  # a script: sent only when the caller adds it


@dataclass(frozen=True)
class Actor:
    """Who is acting: the credential's name, or the proxy's user and the proxy."""

    name: str
    via: Via


@dataclass(frozen=True)
class Credentials:
    secrets: Mapping[str, str]
    user_header: str | None = None

    @property
    def configured(self) -> bool:
        return bool(self.secrets)

    def actor(self, authorization: str | None, proxied_user: str | None) -> Actor | None:
        """The actor a request's `Authorization` header proves, or None."""
        scheme, _, value = (authorization or "").strip().partition(" ")
        actor: Actor | None = None
        if scheme.lower() == "basic":
            name, secret = _basic(value.strip())
            if name in self.secrets and _matches(self.secrets[name], secret):
                actor = Actor(name, Via.BASIC)
        elif scheme.lower() == "bearer":
            token = value.strip()
            for name, secret in self.secrets.items():
                if token and _matches(secret, token):
                    actor = Actor(name, Via.BEARER)
                    break
        if actor is not None and proxied_user and self.user_header:
            return Actor(f"{proxied_user.strip()[:100]} (via {actor.name})", actor.via)
        return actor

    def form_token(self, actor: Actor) -> str:
        """The token a form of this console carries for this actor (CSRF): the same on
        every node with the same credentials, so a form posted to another replica works."""
        key = hashlib.sha256(b"cronclaim console forms\0" + _fingerprint(self.secrets)).digest()
        return hmac.new(key, actor.name.encode(), hashlib.sha256).hexdigest()[:40]


def from_environment(environ: Mapping[str, str] | None = None) -> Credentials:
    """The credentials configured for this process; a malformed entry is a UserError."""
    values = os.environ if environ is None else environ
    secrets: dict[str, str] = {}
    for entry in filter(None, (part.strip() for part in values.get(AUTH_VARIABLE, "").split(","))):
        name, colon, secret = entry.partition(":")
        if not colon or not name.strip() or not secret:
            raise UserError(f"{AUTH_VARIABLE}: expected NAME:SECRET pairs, got an entry {name!r}")
        secrets[name.strip()] = secret
    header = values.get(USER_HEADER_VARIABLE, "").strip() or None
    return Credentials(secrets, header)


def _basic(value: str) -> tuple[str, str]:
    try:
        decoded = base64.b64decode(value, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return "", ""
    name, _, secret = decoded.partition(":")
    return name, secret


def _matches(expected: str, given: str) -> bool:
    if expected.startswith(_HASH_PREFIXES):
        return check_password_hash(expected, given)
    return hmac.compare_digest(expected.encode(), given.encode())


def _fingerprint(secrets: Mapping[str, str]) -> bytes:
    return "\0".join(f"{name}\0{secret}" for name, secret in sorted(secrets.items())).encode()
