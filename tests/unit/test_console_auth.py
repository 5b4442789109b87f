"""Console credentials: parsing the variable, basic and bearer, hashes, the proxy header
and form tokens."""

from __future__ import annotations

import base64

import pytest
from werkzeug.security import generate_password_hash

from scheduler.console.auth import Actor, Via, from_environment
from scheduler.errors import UserError


def basic(name: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{name}:{secret}".encode()).decode()


def test_names_and_secrets_are_read_from_the_variable() -> None:
    credentials = from_environment({"SCHEDULER_CONSOLE_AUTH": " alice:s3:cr:et , bot:tok "})
    assert credentials.configured
    assert credentials.actor(basic("alice", "s3:cr:et"), None) == Actor("alice", Via.BASIC)
    assert credentials.actor("Bearer tok", None) == Actor("bot", Via.BEARER)
    assert credentials.actor(basic("alice", "tok"), None) is None, "a secret is its name's only"
    assert credentials.actor("Bearer s3:cr", None) is None
    assert credentials.actor("Bearer ", None) is None
    assert credentials.actor("Basic !!!", None) is None
    assert credentials.actor(None, None) is None


def test_no_variable_is_read_only() -> None:
    credentials = from_environment({})
    assert not credentials.configured
    assert credentials.actor("Bearer anything", None) is None


@pytest.mark.parametrize("entry", ["alice", ":secret", "alice:"])
def test_a_malformed_entry_is_one_line(entry: str) -> None:
    with pytest.raises(UserError, match=r"^SCHEDULER_CONSOLE_AUTH: expected NAME:SECRET pairs"):
        from_environment({"SCHEDULER_CONSOLE_AUTH": f"bob:pw,{entry}"})


def test_a_hashed_secret_is_checked_as_a_hash() -> None:
    hashed = generate_password_hash("s3cret", method="pbkdf2:sha256:1000")
    credentials = from_environment({"SCHEDULER_CONSOLE_AUTH": f"alice:{hashed}"})
    assert credentials.actor(basic("alice", "s3cret"), None) == Actor("alice", Via.BASIC)
    assert credentials.actor(basic("alice", hashed), None) is None, "the hash is no password"


def test_the_proxy_header_names_the_person_only_with_a_credential() -> None:
    credentials = from_environment(
        {"SCHEDULER_CONSOLE_AUTH": "proxy:pw", "SCHEDULER_CONSOLE_USER_HEADER": "X-Forwarded-User"}
    )
    assert credentials.user_header == "X-Forwarded-User"
    assert credentials.actor("Bearer pw", "carol") == Actor("carol (via proxy)", Via.BEARER)
    assert credentials.actor(None, "carol") is None, "a client around the proxy names no one"
    plain = from_environment({"SCHEDULER_CONSOLE_AUTH": "proxy:pw"})
    assert plain.actor("Bearer pw", "carol") == Actor("proxy", Via.BEARER), "not opted in"


def test_form_tokens_agree_across_replicas_and_differ_by_actor() -> None:
    one = from_environment({"SCHEDULER_CONSOLE_AUTH": "alice:a,bob:b"})
    two = from_environment({"SCHEDULER_CONSOLE_AUTH": "bob:b,alice:a"})
    alice, bob = Actor("alice", Via.BASIC), Actor("bob", Via.BASIC)
    assert one.form_token(alice) == two.form_token(alice)
    assert one.form_token(alice) != one.form_token(bob)
    other = from_environment({"SCHEDULER_CONSOLE_AUTH": "alice:changed,bob:b"})
    assert other.form_token(alice) != one.form_token(alice), "new secrets, new tokens"
