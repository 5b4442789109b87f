"""The webhook notifier: an event as a JSON POST (or a Slack-compatible message), signed
with HMAC-SHA256 so the receiver can trust it, under a timeout.

Delivery is at least once per event (a node may die after the POST and before it
records it), so every payload carries the event's key and the `X-Scheduler-Event-Key`
header: a receiver de-duplicates on it. Tries are the delivery's (`scheduler.node.
alerts`): a webhook that fails is tried again with a growing pause, `retries` times.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from scheduler.model import Event

SIGNATURE_HEADER = "X-Scheduler-Signature"
KEY_HEADER = "X-Scheduler-Event-Key"
FORMATS = ("json", "slack")
# How old a signed timestamp a receiver should accept, by default (replays).
SIGNATURE_TOLERANCE_S = 300
USER_AGENT = "cronclaim-webhook/1"


class WebhookError(Exception):
    """The receiver did not take the event (a status other than 2xx, or no answer)."""


class Webhook:
    """A hook that POSTs each event to `url`.

    `secret`: sign the body (header `X-Scheduler-Signature: t=<unix>,v1=<hex>`, the
    HMAC-SHA256 of `"<t>." + body`). `format="slack"`: a `{"text": ...}` message an
    incoming Slack (or Mattermost, Rocket.Chat) webhook shows as is. `timeout` seconds per
    try; `retries` more tries after a failed one.
    """

    def __init__(
        self,
        url: str,
        *,
        secret: str | None = None,
        format: str = "json",
        timeout: float = 10.0,
        retries: int = 5,
    ) -> None:
        self.url = url
        self.secret = secret
        self.format = format
        self.timeout = timeout
        self.retries = retries

    @property
    def hook_name(self) -> str:
        """Stable across nodes, without the secret or the query string (often a token)."""
        parts = urlsplit(self.url)
        return f"webhook:{parts.scheme}://{parts.netloc}{parts.path}"

    @property
    def max_tries(self) -> int:
        return self.retries + 1

    def problem(self) -> str | None:
        """Why this webhook cannot work, checked when it is registered."""
        parts = urlsplit(self.url) if isinstance(self.url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            return f"webhook url {self.url!r} is not an http:// or https:// URL"
        if self.format not in FORMATS:
            return f"webhook format {self.format!r} is not one of: {', '.join(FORMATS)}"
        if not isinstance(self.timeout, int | float) or self.timeout <= 0:
            return f"webhook timeout {self.timeout!r} must be a positive number of seconds"
        if not isinstance(self.retries, int) or self.retries < 0:
            return f"webhook retries {self.retries!r} must be a whole number, 0 or more"
        return None

    def payload(self, event: Event) -> dict[str, Any]:
        """The body POSTed for an event: the event itself, or a Slack message that
        carries its key (`format="slack"`)."""
        data = event.as_dict()
        if self.format == "slack":
            return {"text": slack_text(event), "event_key": event.key}
        return data

    def __call__(self, event: Event) -> None:
        body = json.dumps(self.payload(event), separators=(",", ":")).encode()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            KEY_HEADER: event.key,
        }
        if self.secret:
            headers[SIGNATURE_HEADER] = sign(self.secret, body, int(time.time()))
        # The scheme is checked to be http or https when the hook is registered (`problem`).
        request = urllib.request.Request(  # noqa: S310
            self.url, data=body, headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                status = response.status
        except urllib.error.HTTPError as error:
            raise WebhookError(f"answered {error.code}") from None
        except (urllib.error.URLError, OSError) as error:
            raise WebhookError(str(error)) from None
        if not 200 <= status < 300:
            raise WebhookError(f"answered {status}")


def slack_text(event: Event) -> str:
    """One line a chat shows: what happened, to which period, and the key."""
    line = (
        f"*{event.kind.value.replace('_', ' ')}*: `{event.job}` period {event.as_dict()['period']}"
    )
    if event.detail:
        line += f": {event.detail}"
    return f"{line} (key {event.key})"


def sign(secret: str, body: bytes, timestamp: int) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={digest.hexdigest()}"


def verify_signature(
    secret: str, body: bytes, header: str, *, tolerance: float = SIGNATURE_TOLERANCE_S
) -> bool:
    """For a receiver: whether `header` signs `body` with `secret`, recently enough."""
    try:
        fields = dict(part.split("=", 1) for part in header.split(","))
        timestamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    if abs(time.time() - timestamp) > tolerance:
        return False
    return hmac.compare_digest(
        sign(secret, body, timestamp), f"t={timestamp},v1={fields.get('v1', '')}"
    )
