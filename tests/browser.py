"""A headless Chromium for the HTML sheets' tests, driven by Selenium with
Debian's chromedriver (``apt-get install chromium chromium-driver``): no
browser is downloaded.  :func:`browser` gives None, with the reason, when
either is missing (the tests then skip, saying so)."""

from __future__ import annotations

import os
import shutil
from typing import Any

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
DRIVER = ("chromedriver",)


def _which(names: tuple[str, ...], env: str) -> str | None:
    given = os.environ.get(env)
    if given:
        return given if os.path.exists(given) else None
    return next((p for p in map(shutil.which, names) if p), None)


def missing() -> str | None:
    """Why no browser test can run here (None: they can)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install '.[test]')"
    if _which(CHROMIUM, "SYMFLOPS_CHROMIUM") is None:
        return "no Chromium on the path (Debian: apt-get install chromium chromium-driver)"
    if _which(DRIVER, "SYMFLOPS_CHROMEDRIVER") is None:
        return "no chromedriver on the path (Debian: apt-get install chromium-driver)"
    return None


def start(width: int = 1280, height: int = 900) -> Any:
    """A headless Chromium at ``width`` x ``height`` CSS pixels, its console
    log readable (``driver.get_log('browser')``)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = _which(CHROMIUM, "SYMFLOPS_CHROMIUM")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}", "--force-device-scale-factor=1",
                "--no-first-run", "--disable-extensions", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--metrics-recording-only"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=_which(DRIVER, "SYMFLOPS_CHROMEDRIVER"))
    return webdriver.Chrome(options=options, service=service)
