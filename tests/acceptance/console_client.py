"""A small HTTP client for the web console of a real `scheduler` process: pages, forms
with their token, actions with basic auth or a bearer token."""

from __future__ import annotations

import base64
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from email.message import Message

from tests.acceptance.processes import Node

TOKEN = re.compile(r'name="form_token" value="([0-9a-f]*)"')


@dataclass
class Answer:
    status: int
    headers: Message
    body: str
    location: str | None = None

    @property
    def token(self) -> str:
        match = TOKEN.search(self.body)
        assert match, "the page carries a form token"
        return match.group(1)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


@dataclass
class Console:
    port: int
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, node: Node) -> Console:
        event = node.wait_for(lambda event: event.get("event") == "http_listening", timeout=20)
        return cls(int(event["port"]))

    def as_user(self, name: str, secret: str) -> Console:
        pair = base64.b64encode(f"{name}:{secret}".encode()).decode()
        return Console(self.port, {**self.headers, "Authorization": f"Basic {pair}"})

    def with_token(self, secret: str) -> Console:
        return Console(self.port, {**self.headers, "Authorization": f"Bearer {secret}"})

    def get(self, path: str, **headers: str) -> Answer:
        return self._send(
            urllib.request.Request(self.url(path), headers={**self.headers, **headers})
        )

    def post(self, path: str, form: dict[str, str], **headers: str) -> Answer:
        data = urllib.parse.urlencode(form).encode()
        request = urllib.request.Request(
            self.url(path), data=data, method="POST", headers={**self.headers, **headers}
        )
        return self._send(request)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def _send(self, request: urllib.request.Request) -> Answer:
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(request, timeout=20) as response:
                return Answer(response.status, response.headers, response.read().decode())
        except urllib.error.HTTPError as error:
            body = error.read().decode(errors="replace")
            return Answer(error.code, error.headers, body, error.headers.get("Location"))
