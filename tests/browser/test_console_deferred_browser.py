"""The console in a real headless Chromium shows the periods a catch-up budget deferred
after a real outage, and an operator signed in skips them from the job's page."""

from __future__ import annotations

import base64
import time
from pathlib import Path

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
from tests.acceptance.records import run_rows
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
