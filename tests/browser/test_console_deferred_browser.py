"""The console in a real headless Chromium shows the periods a catch-up budget deferred
after a real outage, and an operator signed in skips them from the job's page."""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from scheduler.states import Reason, RunStatus
from scheduler.store import deferred as deferred_rows
from scheduler.store.database import open_database
from tests.acceptance.console_client import Console
from tests.acceptance.processes import start_node
from tests.acceptance.records import run_rows, unfired_schedule
from tests.acceptance.test_console import AUTH

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def _deferred(database_url: str) -> int:
    database = open_database(database_url)
    try:
        found = deferred_rows.deferred_periods(database, "budgeted")
        return found[0].waiting if found else 0
    finally:
        database.dispose()


def test_deferred_periods_are_shown_and_skipped_from_the_jobs_page(
    tmp_path: Path, database_url: str, browser: webdriver.Chrome
) -> None:
    log = str(tmp_path / "executions.txt")
    first = start_node(tmp_path, "first", database_url, "budgeted", EXECUTION_LOG=log)
    first.wait_for(lambda event: event.get("event") == "node_started")
    time.sleep(1.5)
    assert first.stop() == 0
    time.sleep(8)  # eight periods owed: three within the budget, five deferred
    node = start_node(
        tmp_path,
        "web",
        database_url,
        "budgeted",
        ["--http", "127.0.0.1:0"],
        EXECUTION_LOG=log,
        SCHEDULER_CONSOLE_AUTH=AUTH,
    )
    wait = WebDriverWait(browser, 20, poll_frequency=0.2)
    try:
        node.wait_for(lambda event: event.get("event") == "periods_deferred")
        waiting = _deferred(database_url)
        assert waiting >= 4
        pair = base64.b64encode(b"alice:s3cret").decode()
        browser.execute_cdp_cmd("Network.enable", {})
        browser.execute_cdp_cmd(
            "Network.setExtraHTTPHeaders", {"headers": {"Authorization": f"Basic {pair}"}}
        )
        browser.get(Console.of(node).url("") + "/jobs/budgeted")
        shown = browser.find_element(By.CSS_SELECTOR, "section.deferred p.warn").text
        assert shown.startswith(f"{waiting} period(s) deferred by the catch-up budget")
        browser.find_element(By.ID, "skip-deferred").click()
        alert = wait.until(expected_conditions.alert_is_present())
        assert alert.text.startswith("Skip the deferred periods of budgeted?")
        alert.accept()
        notice = wait.until(lambda driver: driver.find_element(By.CSS_SELECTOR, "p.notice"))
        assert notice.text.startswith("Skipped")
        assert browser.find_elements(By.CSS_SELECTOR, "section.deferred") == []
    finally:
        assert node.stop() == 0
    assert _deferred(database_url) == 0
    skipped = [
        row
        for row in run_rows(database_url, "budgeted")
        if (row["status"], row["reason"]) == (RunStatus.SKIPPED, Reason.BUDGET)
    ]
    assert len(skipped) == waiting
    ran = {line.split()[0] for line in Path(log).read_text().splitlines()}
    assert not {row["period"].isoformat() for row in skipped} & ran, "a skipped period ran"
    actions = [event for event in node.events() if event["event"] == "console_action"]
    assert [(e["actor"], e["action"], e["job"]) for e in actions] == [
        ("alice", "skip_deferred", "budgeted")
    ]


def test_a_schedules_deferred_periods_are_caught_up_from_its_page(
    tmp_path: Path, database_url: str, browser: webdriver.Chrome
) -> None:
    """A schedule created at run time that no node fired for 75 s: its template's budget
    defers most of its late periods; the schedule's page shows them, and an operator's
    "Catch up now" has a node run each of them once."""
    log = str(tmp_path / "executions.txt")
    first = start_node(tmp_path, "first", database_url, "budgeted", EXECUTION_LOG=log)
    first.wait_for(lambda event: event.get("event") == "node_started")
    assert first.stop() == 0  # the schema and the template registered
    unfired_schedule(database_url, "t/1", "tenant_budgeted", 75)
    node = start_node(
        tmp_path,
        "web",
        database_url,
        "budgeted",
        ["--http", "127.0.0.1:0"],
        EXECUTION_LOG=log,
        SCHEDULER_CONSOLE_AUTH=AUTH,
    )
    wait = WebDriverWait(browser, 20, poll_frequency=0.2)
    try:
        # The schedule's own (its template's code job `budgeted` defers some too).
        node.wait_for(
            lambda event: (event.get("event"), event.get("job")) == ("periods_deferred", "@t/1")
        )
        database = open_database(database_url)
        try:
            [found] = deferred_rows.deferred_periods(database, "@t/1")
        finally:
            database.dispose()
        assert found.waiting >= 10
        pair = base64.b64encode(b"alice:s3cret").decode()
        browser.execute_cdp_cmd("Network.enable", {})
        browser.execute_cdp_cmd(
            "Network.setExtraHTTPHeaders", {"headers": {"Authorization": f"Basic {pair}"}}
        )
        browser.get(Console.of(node).url("") + "/schedule?key=t%2F1")
        shown = browser.find_element(By.CSS_SELECTOR, "section.deferred p.warn").text
        assert shown.startswith(f"{found.waiting} period(s) deferred by the catch-up budget")
        browser.find_element(By.ID, "run-deferred").click()
        alert = wait.until(expected_conditions.alert_is_present())
        assert alert.text.startswith("Run ")
        assert " deferred period(s) of @t/1 now" in alert.text
        alert.accept()
        notice = wait.until(lambda driver: driver.find_element(By.CSS_SELECTOR, "p.notice"))
        assert notice.text.startswith("Approved")
        assert "/schedule?key=t/1&notice=deferred-run" in browser.current_url
        # The deferred periods, and those still waiting their pace: each run once.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _deferred_left(database_url):
            time.sleep(0.2)
        assert not _deferred_left(database_url)
        manual = _manual(database_url)
        assert found.waiting <= len(manual) <= found.waiting + found.paced
    finally:
        assert node.stop() == 0
    ran = [line.split()[0] for line in Path(log).read_text().splitlines()]
    assert len(ran) == len(set(ran)), "a period ran twice"
    assert {row["period"].isoformat() for row in manual} <= set(ran)
    actions = [event for event in node.events() if event["event"] == "console_action"]
    assert [(e["actor"], e["action"], e["job"]) for e in actions] == [
        ("alice", "run_deferred", "@t/1")
    ]


def _deferred_left(database_url: str) -> list[dict[str, Any]]:
    return [
        row
        for row in run_rows(database_url, "@t/1")
        if row["status"] == RunStatus.DEFERRED
        or (row["origin"] == "manual" and row["status"] != RunStatus.SUCCEEDED)
    ]


def _manual(database_url: str) -> list[dict[str, Any]]:
    return [
        row
        for row in run_rows(database_url, "@t/1")
        if row["origin"] == "manual" and row["status"] == RunStatus.SUCCEEDED
    ]
