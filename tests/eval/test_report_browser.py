"""Open report.html in headless Chromium: it renders, every image loads, the console stays clean.

Needs /usr/bin/chromium and /usr/bin/chromedriver (scripts/install_browser.sh) and selenium (dev extra).
"""

from __future__ import annotations

import base64
import io
import shutil
import struct
from pathlib import Path

import pytest
from rich.console import Console

from mcprl.eval.report import build_report

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed (pip install -e '.[dev]')")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
    reason="headless Chromium not installed; run scripts/install_browser.sh",
)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1200,1000",
)


@pytest.fixture
def chromium(tmp_path: Path):
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(
        options=options, service=Service(executable_path=str(CHROMEDRIVER))
    )  # no selenium-manager
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()
    shutil.rmtree(tmp_path / "profile", ignore_errors=True)


def test_report_renders_in_headless_chromium(run_dir: Path, tmp_path: Path, chromium):
    paths = build_report(run_dir, console=Console(file=io.StringIO()))
    chromium.get(paths.html.resolve().as_uri())

    assert chromium.title.startswith("mcprl report")
    images = chromium.execute_script(
        "return Array.from(document.images).map(i => [i.getAttribute('src'), i.complete, i.naturalWidth]);"
    )
    assert len(images) == len(paths.images)
    assert all(complete and width > 0 for _, complete, width in images), images
    assert chromium.execute_script("return document.querySelectorAll('.alarm').length;") >= 1
    errors = [e for e in chromium.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert errors == []

    shot = tmp_path / "report.png"
    page = chromium.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": page["width"], "height": page["height"], "scale": 1}
    full = chromium.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
    )
    shot.write_bytes(base64.b64decode(full["data"]))
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 1000 and height >= 2000 * len(paths.images) // 4
