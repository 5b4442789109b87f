"""The routes out of the scheduler for people on call: a webhook (`webhook`), Sentry Crons
(`sentry`), OpenTelemetry spans (`tracing`). Each is optional; the last two only work
with their extra installed (`cronclaim[sentry]`, `cronclaim[otel]`).

This layer sits between the run path and the store: it knows jobs, runs and events as
values and imports neither the run path nor the store.
"""

from scheduler.alerting.webhook import Webhook, verify_signature

__all__ = ["Webhook", "verify_signature"]
