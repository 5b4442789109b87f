"""The admin, where the scheduler's jobs, runs, items and schedules show."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
