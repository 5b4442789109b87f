"""The tenants in the admin, with two actions on the selected tenants: start their weekly
report (a schedule of the `tenant-report` template for each) and pause it.

Each tenant's schedule is written through Django's connection inside
`transaction.atomic()`, with the tenant's own row: both commit, or neither (a tenant
that already has its schedule, or has none to pause, keeps its row as it was). The
actions need the tenant's change permission, as any admin action does by default.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import admin, messages
from django.db import connection, transaction
from django.db.models import QuerySet
from django.http import HttpRequest

from billing.jobs import tenant_report
from billing.models import Tenant
from scheduler.django import database_url
from scheduler.errors import UserError
from scheduler.schedules import Schedules


def _each(
    modeladmin: admin.ModelAdmin[Tenant],
    request: HttpRequest,
    tenants: QuerySet[Tenant],
    done: str,
    change: Callable[[Schedules, Tenant], None],
) -> None:
    """`change` for each tenant, each in a transaction of its own; one message for what
    was done and one per refusal."""
    changed = []
    with Schedules(database_url()) as schedules:
        for tenant in tenants.order_by("pk"):
            try:
                with transaction.atomic():
                    change(schedules, tenant)
            except UserError as error:
                modeladmin.message_user(request, str(error), messages.ERROR)
            else:
                changed.append(tenant.report_key)
    if changed:
        modeladmin.message_user(request, f"{done}: {', '.join(changed)}", messages.SUCCESS)


@admin.action(description="Start the weekly report of the selected tenants")
def start_weekly_report(
    modeladmin: admin.ModelAdmin[Tenant], request: HttpRequest, queryset: QuerySet[Tenant]
) -> None:
    def start(schedules: Schedules, tenant: Tenant) -> None:
        tenant.weekly_report = True
        tenant.save(update_fields=["weekly_report"])
        schedules.create(
            tenant.report_key,
            tenant_report,
            cron="0 7 * * 1",
            timezone="Europe/Berlin",
            args={"tenant": str(tenant.pk)},
            connection=connection,
        )

    _each(modeladmin, request, queryset, "Weekly report scheduled", start)


@admin.action(description="Pause the weekly report of the selected tenants")
def pause_weekly_report(
    modeladmin: admin.ModelAdmin[Tenant], request: HttpRequest, queryset: QuerySet[Tenant]
) -> None:
    def pause(schedules: Schedules, tenant: Tenant) -> None:
        tenant.weekly_report = False
        tenant.save(update_fields=["weekly_report"])
        schedules.pause(tenant.report_key, connection=connection)

    _each(modeladmin, request, queryset, "Weekly report paused", pause)


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("name", "weekly_report")
    actions = (start_weekly_report, pause_weekly_report)
