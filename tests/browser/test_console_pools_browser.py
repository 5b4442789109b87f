"""The console in a real headless Chromium shows each concurrency pool on the overview:
its limits, what runs and what waits, and whose limits are in force, as the pool's
runs go on under real nodes and an operator lowers its limit."""

from __future__ import annotations

from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.acceptance.console_client import Console
from tests.acceptance.processes import run_command, start_node

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def _cells(browser: webdriver.Chrome) -> dict[str, str]:
    row = browser.find_element(By.CSS_SELECTOR, "section.pools tr.pool")
    names = ["name", "limit", "per_key", "running", "waiting", "since", "set_by"]
    texts = [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
    return dict(zip(names, texts, strict=True))


def test_the_overview_shows_each_pool_and_its_waiting_runs(
    tmp_path: Path, database_url: str, browser: webdriver.Chrome
) -> None:
    log = str(tmp_path / "executions.txt")
    node = start_node(
        tmp_path, "web", database_url, "pooled", ["--http", "127.0.0.1:0"], EXECUTION_LOG=log
    )
    wait = WebDriverWait(browser, 30, poll_frequency=0.3)
    try:
        node.wait_for(lambda event: event.get("event") == "run_waiting")
        url = Console.of(node).url("") + "/"

        def waiting_shown(driver: webdriver.Chrome) -> dict[str, str] | None:
            driver.get(url)
            cells = _cells(driver)
            return cells if cells["waiting"].endswith("waiting (pool)") else None

        shown = wait.until(waiting_shown)
        assert shown is not None
        cells = shown
        assert (cells["name"], cells["limit"], cells["per_key"], cells["set_by"]) == (
            "tenants",
            "3",
            "1",
            "the code",
        )
        assert 1 <= int(cells["running"]) <= 3
        assert cells["since"] != "-"
        changed = run_command(
            ["pools", "set", "tenants", "--limit", "2", "--database-url", database_url], tmp_path
        )
        assert changed.returncode == 0, changed.stderr
        browser.get(url)
        cells = _cells(browser)
        assert cells["limit"] == "2"
        assert cells["set_by"] not in ("the code", "")
    finally:
        assert node.stop() == 0
