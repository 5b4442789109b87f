"""The web console in a real headless Chromium, against a real daemon on SQLite and on
PostgreSQL: what an on-call engineer sees and clicks."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.acceptance.console_client import Console
from tests.acceptance.processes import Node, start_node
from tests.acceptance.test_console import AUTH, PAYLOAD, XSS_JOB, paused

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def _node(tmp_path: Path, database_url: str) -> tuple[Node, str]:
    node = start_node(
        tmp_path,
        "web",
        database_url,
        "console",
        ["--http", "127.0.0.1:0"],
        SCHEDULER_CONSOLE_AUTH=AUTH,
    )
    return node, Console.of(node).url("")


# Read in one script, so that a live refresh swapping the grid in between cannot leave
# an element stale.
CELLS = """
const [job, selector] = arguments;
for (const row of document.querySelectorAll("table.grid tbody tr")) {
  if (row.querySelector("td.name").textContent === job) {
    return Array.from(row.querySelectorAll(selector), (cell) => cell.title);
  }
}
return [];
"""


def _titles(driver: webdriver.Chrome, job: str, selector: str = "a.c") -> list[str]:
    titles: list[str] = driver.execute_script(CELLS, job, selector)
    return titles


def _click(driver: webdriver.Chrome, selector: str) -> bool:
    driver.find_element(By.CSS_SELECTOR, selector).click()
    return True


def _newest(driver: webdriver.Chrome, job: str) -> str:
    titles = _titles(driver, job)
    return titles[-1] if titles else ""


def test_a_failed_period_is_a_failed_cell_opening_its_traceback_as_text_and_the_grid_is_live(
    tmp_path: Path, database_url: str, browser: webdriver.Chrome
) -> None:
    node, base = _node(tmp_path, database_url)
    wait = WebDriverWait(browser, 20, poll_frequency=0.2)
    try:
        browser.get(base + "/")
        failed = wait.until(lambda driver: _titles(driver, XSS_JOB, "a.c.s-failed"))
        assert failed[-1].endswith(" failed")
        names = browser.execute_script(
            "return Array.from(document.querySelectorAll('td.name a'),"
            " (a) => [a.textContent, a.querySelectorAll('b').length]);"
        )
        assert [XSS_JOB, 0] in names, "markup in a job name is shown as text"

        # Live: a newer period appears without a reload (the marker set here survives).
        browser.execute_script("window.stayed = true;")
        first = wait.until(lambda driver: _newest(driver, "heartbeat"))
        wait.until(lambda driver: _newest(driver, "heartbeat") != first)
        assert browser.execute_script("return window.stayed === true;"), "no full reload"

        href = browser.execute_script(
            CELLS.replace("cell.title", "cell.getAttribute('href')"), XSS_JOB, "a.c.s-failed"
        )[-1]
        # A real click; tried again if a refresh swapped the cell away under it.
        retrying = WebDriverWait(browser, 10, ignored_exceptions=[StaleElementReferenceException])
        retrying.until(lambda driver: _click(driver, f"a[href='{href}']"))
        traceback = wait.until(lambda driver: driver.find_element(By.CSS_SELECTOR, "pre.traceback"))
        assert f"RuntimeError: payment refused: {PAYLOAD}" in traceback.text
        assert "in _deep" in traceback.text
        message = browser.find_element(By.CSS_SELECTOR, "p.error .message")
        assert message.text == f"payment refused: {PAYLOAD}"
        assert "/runs/" in browser.current_url
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert.text  # noqa: B018 - the payload's alert never ran
        sources = browser.execute_script(
            "return Array.from(document.scripts, (script) => script.getAttribute('src'));"
        )
        assert sources == ["/static/htmx.min.js", "/static/console.js"]
    finally:
        assert node.stop() == 0


def test_pause_works_with_credentials_and_is_refused_without(
    tmp_path: Path, database_url: str, browser: webdriver.Chrome
) -> None:
    node, base = _node(tmp_path, database_url)
    wait = WebDriverWait(browser, 20, poll_frequency=0.2)
    try:
        browser.get(base + "/jobs/heartbeat")
        browser.find_element(By.ID, "pause").click()
        refused = wait.until(lambda driver: driver.find_element(By.ID, "message"))
        assert "Sign in to act" in refused.text
        assert not paused(database_url, "heartbeat")

        pair = base64.b64encode(b"alice:s3cret").decode()
        browser.execute_cdp_cmd("Network.enable", {})
        browser.execute_cdp_cmd(
            "Network.setExtraHTTPHeaders", {"headers": {"Authorization": f"Basic {pair}"}}
        )
        browser.get(base + "/jobs/heartbeat")
        assert "signed in as alice" in browser.find_element(By.CSS_SELECTOR, ".who").text
        browser.find_element(By.ID, "pause").click()
        notice = wait.until(lambda driver: driver.find_element(By.CSS_SELECTOR, "p.notice"))
        assert notice.text.startswith("Paused")
        assert browser.find_element(By.CSS_SELECTOR, "h1 .badge").text == "paused"
        assert paused(database_url, "heartbeat")
        assert browser.find_elements(By.ID, "resume"), "the page now offers Resume"
    finally:
        assert node.stop() == 0
    actions = [event for event in node.events() if event["event"] == "console_action"]
    assert [(e["actor"], e["action"]) for e in actions] == [("alice", "pause")]
