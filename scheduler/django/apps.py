"""The app's configuration: what `INSTALLED_APPS` loads, and what it wires at start-up."""

from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class SchedulerConfig(AppConfig):
    """Labelled `cronclaim` (the distribution), not `scheduler`: a project's own app is
    often called that, and two apps may not share a label."""

    name = "scheduler.django"
    label = "cronclaim"
    verbose_name = "Scheduler"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from scheduler import call_hooks  # noqa: PLC0415 - once Django is set up
        from scheduler.django.connections import fresh_connections  # noqa: PLC0415
        from scheduler.django.schema import migrate_after_django  # noqa: PLC0415

        call_hooks.around_calls(fresh_connections)
        post_migrate.connect(migrate_after_django, sender=self, dispatch_uid="cronclaim")
