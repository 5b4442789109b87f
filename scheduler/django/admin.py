"""The scheduler in the Django admin: jobs, runs (with their tracebacks), items and the
schedules created at run time.

Everything is read-only: a row is the scheduler's record, and no form edits it. What an
operator may do goes through the scheduler's API, as the CLI's commands do: pause and
resume a job (`Admin`), create a schedule for a tenant, and pause, resume and delete
schedules (`Schedules`). Those need the model's permission (`cronclaim.change_job`,
`cronclaim.add_schedule`, `cronclaim.change_schedule`, `cronclaim.delete_schedule`);
viewing needs the view permission, as any model of the admin.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.db import connections, transaction
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from scheduler.admin import Admin
from scheduler.django import database_url
from scheduler.django.models import Item, Job, Run, Schedule
from scheduler.django.settings import scheduler_settings
from scheduler.errors import UserError
from scheduler.registry import TEMPLATE_CRON
from scheduler.schedules import Schedules
from scheduler.states import Origin, RunStatus
from scheduler.store.items import ItemState
from scheduler.triggers import TriggerKind


def _alias() -> str:
    """The alias the scheduler's tables are read through."""
    alias = scheduler_settings(getattr(settings, "SCHEDULER", None)).get("DATABASE", "default")
    return str(alias)


def _url() -> str:
    return database_url()


def _may(request: HttpRequest, permission: str) -> bool:
    user: Any = request.user  # a custom user model has `has_perm` as Django's own does
    return bool(user.has_perm(permission))


class ReadOnly(admin.ModelAdmin):  # type: ignore[type-arg]
    """Viewable with the view permission; never added, changed or deleted by a form."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).using(_alias())

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_operate_permission(self, request: HttpRequest) -> bool:
        """The actions' permission: the model's change permission."""
        return _may(request, f"{self.opts.app_label}.change_{self.opts.model_name}")

    def has_remove_permission(self, request: HttpRequest) -> bool:
        return _may(request, f"{self.opts.app_label}.delete_{self.opts.model_name}")


def _fixed(field: str, values: Iterable[str]) -> type[admin.SimpleListFilter]:
    """A filter by the values the scheduler writes, listed from its own enums: Django's
    default asks the table for its DISTINCT values, a full read of a long history."""
    choices = [(value, value) for value in values]

    class Fixed(admin.SimpleListFilter):
        title = field
        parameter_name = field

        def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
            return choices

        def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
            value = self.value()
            return queryset.filter(**{field: value}) if value else queryset

    return Fixed


@contextmanager
def _reported(request: HttpRequest, modeladmin: ReadOnly, done: str) -> Iterator[list[str]]:
    """Collect the names an action changed, and say what happened in one message; a
    scheduler's refusal is one error message, the rest left as they were."""
    changed: list[str] = []
    try:
        yield changed
    except UserError as error:
        modeladmin.message_user(request, str(error), messages.ERROR)
        return
    if changed:
        modeladmin.message_user(
            request, f"{done.capitalize()}: {', '.join(changed)}", messages.SUCCESS
        )


def _job_action(verb: str, method: Callable[[Admin, str], None]) -> Any:
    @admin.action(description=f"{verb.capitalize()} the selected jobs", permissions=["operate"])
    def act(modeladmin: ReadOnly, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        with _reported(request, modeladmin, verb + "d") as changed, Admin(_url()) as fleet:
            for job in queryset:
                method(fleet, job.name)
                changed.append(job.name)

    act.__name__ = f"{verb}_jobs"
    return act


@admin.register(Job)
class JobAdmin(ReadOnly):
    list_display = ("name", "cron", "timezone", "paused", "pause_reason", "last_seen")
    list_filter = ("paused",)
    search_fields = ("name",)
    actions = (_job_action("pause", Admin.pause), _job_action("resume", Admin.resume))


@admin.register(Run)
class RunAdmin(ReadOnly):
    list_display = (
        "job",
        "period",
        "status",
        "reason",
        "origin",
        "attempt",
        "holder",
        "duration_ms",
        "error_type",
    )
    list_filter = (_fixed("status", RunStatus), _fixed("origin", Origin))
    search_fields = ("job", "id")
    exclude = ("error_traceback",)
    readonly_fields = ("traceback",)
    show_full_result_count = False  # no count(*) of a long history on each page

    @admin.display(description="traceback")
    def traceback(self, run: Run) -> SafeString:
        return format_html("<pre>{}</pre>", run.error_traceback or "")


@admin.register(Item)
class ItemAdmin(ReadOnly):
    list_display = ("job", "key", "state", "period", "attempt", "node", "claimed_at", "done_at")
    list_display_links = None  # (job, key) names an item: no page of its own
    list_filter = (_fixed("state", ItemState),)
    search_fields = ("job", "key")
    show_full_result_count = False


def _schedule_action(verb: str, permission: str) -> Any:
    @admin.action(
        description=f"{verb.capitalize()} the selected schedules", permissions=[permission]
    )
    def act(modeladmin: ReadOnly, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        done = "deleted" if verb == "delete" else verb + "d"
        with _reported(request, modeladmin, done) as changed, Schedules(_url()) as schedules:
            for schedule in queryset:
                getattr(schedules, verb)(schedule.key)
                changed.append(schedule.key)

    act.__name__ = f"{verb}_schedules"
    return act


class NewSchedule(forms.ModelForm):  # type: ignore[type-arg]
    """A schedule of a template job, created through `Schedules.create` when the form is
    cleaned: the scheduler's own checks (the trigger, the arguments, the key) become the
    form's errors, and a form that validates has created its schedule."""

    class Meta:
        model = Schedule
        fields = ("key", "job", "cron", "every_seconds", "timezone", "args", "paused")
        help_texts = {  # noqa: RUF012 - Django reads it from the class
            "key": "e.g. tenant-42:weekly-report",
            "cron": "a cron expression, or leave empty and give every_seconds",
            "args": 'the function\'s keyword arguments, as JSON: {"tenant": 42}',
        }

    job = forms.ChoiceField(choices=())

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        templates = Job.objects.using(_alias()).filter(cron=TEMPLATE_CRON)
        field = self.fields["job"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [(job.name, job.name) for job in templates]

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        if self.errors:
            return cleaned
        try:
            arguments = json.loads(cleaned.get("args") or "{}")
        except ValueError as error:
            raise forms.ValidationError({"args": f"not JSON: {error}"}) from None
        every = cleaned.get("every_seconds")
        alias = _alias()
        try:
            # In the admin's own transaction (its log entry commits with the schedule):
            # a second writer on SQLite would wait for it, and it for the writer.
            with Schedules(_url()) as schedules, transaction.atomic(using=alias):
                schedules.create(
                    cleaned["key"],
                    cleaned["job"],
                    cron=cleaned.get("cron") or None,
                    every=f"{every}s" if every else None,
                    timezone=cleaned.get("timezone") or "UTC",
                    args=arguments,
                    paused=bool(cleaned.get("paused")),
                    connection=connections[alias],
                )
        except UserError as error:
            raise forms.ValidationError(str(error)) from None
        return cleaned


@admin.register(Schedule)
class ScheduleAdmin(ReadOnly):
    list_display = (
        "key",
        "job",
        "trigger",
        "cron",
        "every_seconds",
        "timezone",
        "paused",
        "next_due_at",
        "deleted_at",
    )
    list_filter = ("paused", _fixed("trigger", TriggerKind))
    search_fields = ("key", "job")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return _may(request, f"{self.opts.app_label}.add_{self.opts.model_name}")

    def get_form(
        self, request: HttpRequest, obj: Model | None = None, change: bool = False, **kwargs: Any
    ) -> Any:
        if obj is None:  # the add page: created through the scheduler
            kwargs["form"] = NewSchedule
        return super().get_form(request, obj, change, **kwargs)

    def save_model(self, request: HttpRequest, obj: Model, form: Any, change: bool) -> None:
        """Nothing to save: `NewSchedule.clean` created the schedule."""

    actions = (
        _schedule_action("pause", "operate"),
        _schedule_action("resume", "operate"),
        _schedule_action("delete", "remove"),
    )
