"""The console in a real headless Chromium shows what the fleet policies of issue 44
did: a job the scheduler paused after a failure streak says so and why (its page, and
its badge on the overview), and a job's page names its calendars, marking one whose
dates end within 30 days."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By

from scheduler.store import jobs as stored_jobs
from scheduler.store.database import open_database
from tests.acceptance.console_client import Console
from tests.acceptance.processes import start_node
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def _paused(database_url: str, name: str) -> bool:
    database = open_database(database_url)
    try:
        return stored_jobs.all_jobs(database, [name])[0].paused
    finally:
        database.dispose()


def test_a_job_paused_by_failures_and_a_jobs_calendars_are_shown(
    tmp_path: Path, database_url: str, browser: webdriver.Chrome
) -> None:
    today = datetime.now(UTC).date()
    broken = tmp_path / "broken"
    broken.touch()
    env = {
        "HEARD_LOG": str(tmp_path / "heard.jsonl"),
        "STREAKY_BROKEN": str(broken),
        "HOLIDAY": today.isoformat(),
        "WORKDAY_OFF": (today + timedelta(days=1)).isoformat(),
        "EXECUTION_LOG": str(tmp_path / "executions.jsonl"),
    }
    node = start_node(
        tmp_path, "web", database_url, "streaky,holidays", ["--http", "127.0.0.1:0"], **env
    )
    try:
        base = Console.of(node).url("")
        wait_until(lambda: _paused(database_url, "streaky"), timeout=30)
        browser.get(base + "/jobs/streaky")
        assert browser.find_element(By.CSS_SELECTOR, "h1 .badge").text == "paused"
        reason = browser.find_element(By.CSS_SELECTOR, "dd.pause-reason").text
        assert reason == "paused by the scheduler: 6 periods failed in a row"
        browser.get(base + "/")
        badges = [b.text for b in browser.find_elements(By.CSS_SELECTOR, "span.badge.paused")]
        assert "paused (failures)" in badges
        browser.get(base + "/jobs/workday")
        shown = browser.find_element(By.CSS_SELECTOR, "dd.calendars").text
        assert shown == (
            f"ops-days-off (dates up to {today + timedelta(days=1)}, ends within 30 days)"
        )
    finally:
        assert node.stop() == 0
