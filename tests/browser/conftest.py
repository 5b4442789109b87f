"""A real headless Chromium for the console's browser tests: Debian's `chromium` and
`chromium-driver` (scripts/ensure-chromium installs them). Missing, the tests fail."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
# The closed network refuses Chromium's own background connections: keep it from trying.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1400,900",
)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    for binary in (CHROMIUM, CHROMEDRIVER):
        if not binary.exists():
            pytest.fail(f"{binary} is missing: run scripts/ensure-chromium", pytrace=False)
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
