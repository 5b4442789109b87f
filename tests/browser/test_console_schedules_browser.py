"""The console's schedules created at run time in a real headless Chromium, against a real
node that fires them, on SQLite and on PostgreSQL: filter the list by a tenant's prefix,
open a schedule, follow one of its periods, pause it and delete it."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from scheduler.node.registration import register
from scheduler.schedules import Schedule, Schedules
from scheduler.store.database import open_database
from tests.acceptance.console_client import Console
from tests.acceptance.jobmods.tenants import tenant_report
from tests.acceptance.processes import start_node
from tests.acceptance.test_console import AUTH

pytestmark = [pytest.mark.slow, pytest.mark.browser]
PULSE = "tenant-42:pulse"
NOTE = "<b>hi</b>"

# Read in one script, so that a live refresh in between cannot leave an element stale.
KEYS = """
return Array.from(document.querySelectorAll("table.schedules td.key a"), (a) => a.textContent);
"""
PERIODS = """
return Array.from(document.querySelectorAll("table.periods tbody tr"), (row) => {
  const link = row.querySelector("td a");
  const status = row.querySelector("span.status");
  return link && status ? [link.getAttribute("href"), status.textContent] : null;
}).filter(Boolean);
"""


def _seed(database_url: str) -> None:
    """Schedules created before any node runs: the template job registered first."""
    database = open_database(database_url)
    try:
        register(database, {"tenant_report": tenant_report})
        schedules = Schedules(database)
        schedules.create(PULSE, "tenant_report", every=1, args={"tenant": 42, "note": NOTE})
        for key in ("tenant-42:weekly", "tenant-420:weekly", "tenant-7:weekly"):
            tenant = int(key.split(":")[0].removeprefix("tenant-"))
            schedules.create(
                key,
                "tenant_report",
                cron="0 9 * * MON",
                timezone="Europe/Paris",
                args={"tenant": tenant},
            )
    finally:
        database.dispose()


def _stored(database_url: str, key: str) -> Schedule | None:
    with Schedules(database_url) as schedules:
        return schedules.get(key)


def _click(driver: webdriver.Chrome, by: str, value: str) -> bool:
    driver.find_element(by, value).click()
    return True


def test_filter_open_pause_and_delete_a_schedule(
    tmp_path: Path, database_url: str, browser: webdriver.Chrome
) -> None:
    _seed(database_url)
    node = start_node(
        tmp_path,
        "web",
        database_url,
        "tenants",
        ["--http", "127.0.0.1:0"],
        SCHEDULER_CONSOLE_AUTH=AUTH,
        EXECUTION_LOG=str(tmp_path / "executions.jsonl"),
    )
    base = Console.of(node).url("")
    wait = WebDriverWait(browser, 20, poll_frequency=0.2)
    # A real click, tried again if a live refresh swapped the element away under it.
    retrying = WebDriverWait(browser, 10, ignored_exceptions=[StaleElementReferenceException])
    try:
        pair = base64.b64encode(b"alice:s3cret").decode()
        browser.execute_cdp_cmd("Network.enable", {})
        browser.execute_cdp_cmd(
            "Network.setExtraHTTPHeaders", {"headers": {"Authorization": f"Basic {pair}"}}
        )
        browser.get(base + "/")
        browser.find_element(By.LINK_TEXT, "Schedules").click()
        wait.until(lambda driver: driver.execute_script(KEYS))
        every = [PULSE, "tenant-42:weekly", "tenant-420:weekly", "tenant-7:weekly"]
        assert browser.execute_script(KEYS) == sorted(every), "in key order (code points)"

        browser.find_element(By.NAME, "prefix").send_keys("tenant-42:")
        browser.find_element(By.ID, "filter").click()
        wait.until(lambda driver: "prefix=tenant-42" in driver.current_url)
        assert browser.execute_script(KEYS) == [PULSE, "tenant-42:weekly"], "not tenant-420"
        assert browser.find_element(By.NAME, "prefix").get_attribute("value") == "tenant-42:"

        retrying.until(lambda driver: _click(driver, By.LINK_TEXT, PULSE))
        wait.until(lambda driver: driver.find_element(By.CSS_SELECTOR, "h1").text.startswith(PULSE))
        assert browser.find_element(By.CSS_SELECTOR, "h1 .badge").text == "active"
        arguments = browser.find_element(By.CSS_SELECTOR, "pre.arguments")
        assert f'"note": "{NOTE}"' in arguments.text, "markup in an argument is text"
        assert not arguments.find_elements(By.TAG_NAME, "b")

        # Its periods appear as the node fires them, without a reload; one opens its run.
        succeeded = wait.until(
            lambda driver: [
                href
                for href, status in driver.execute_script(PERIODS)
                if status.startswith("succeeded")
            ]
        )
        retrying.until(lambda driver: _click(driver, By.CSS_SELECTOR, f"a[href='{succeeded[0]}']"))
        heading = wait.until(lambda driver: driver.find_element(By.CSS_SELECTOR, "h1 a"))
        assert heading.text == f"@{PULSE}"
        assert "/runs/" in browser.current_url
        heading.click()
        pause = wait.until(lambda driver: driver.find_element(By.ID, "pause"))
        assert browser.find_element(By.CSS_SELECTOR, "h1").text.startswith(PULSE)

        pause.click()
        notice = wait.until(lambda driver: driver.find_element(By.CSS_SELECTOR, "p.notice"))
        assert notice.text.startswith("Paused")
        assert browser.find_element(By.CSS_SELECTOR, "h1 .badge").text == "paused"
        assert browser.find_elements(By.ID, "resume"), "the page now offers Resume"
        stored = _stored(database_url, PULSE)
        assert stored is not None
        assert stored.paused

        browser.find_element(By.ID, "delete").click()
        alert = wait.until(expected_conditions.alert_is_present())
        assert alert.text.startswith(f"Delete the schedule {PULSE}?")
        alert.accept()
        notice = wait.until(lambda driver: driver.find_element(By.CSS_SELECTOR, "p.notice"))
        assert notice.text.startswith("Deleted")
        assert browser.current_url.endswith("/schedules?notice=deleted")
        assert PULSE not in browser.execute_script(KEYS)
        assert "tenant-42:weekly" in browser.execute_script(KEYS)
        assert _stored(database_url, PULSE) is None
    finally:
        assert node.stop() == 0
    actions = [event for event in node.events() if event["event"] == "console_action"]
    assert [(e["actor"], e["action"], e["schedule"]) for e in actions] == [
        ("alice", "pause", PULSE),
        ("alice", "delete", PULSE),
    ]
