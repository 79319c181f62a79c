"""A report served by ``browse`` looks as it does opened from its file: its inline ``<style>`` and its
``data:`` charts are allowed for that page (by hash and scheme), nothing else is loosened. The report is
``mirrorscan report``'s real page of the legacy fixture's finished invocation, its charts embedded; it is
compared in Debian's headless chromium (the same setup as test_browse_chromium.py) from ``file://`` and
from the app on uvicorn: computed styles, loaded charts, console errors and the rendered pixels."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
from pathlib import Path

import pytest

from conftest import LEGACY_FIXTURE, new_database

import browse_world as world  # noqa: E402

FINISHED = "1dd40c56-1904-4178-a8ad-f8941f59374b"
"""The legacy fixture's finished forced-choice invocation."""

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
HAVE_CHROMIUM = os.path.exists(CHROMIUM) and os.path.exists(DRIVER)


@pytest.fixture(scope="module")
def site(tmp_path_factory, pg_dsn):
    """The legacy fixture's finished invocation, its real report page (charts embedded) written by
    ``mirrorscan report``, and the browse app on uvicorn at 127.0.0.1."""
    import psycopg

    from mirrorscan.jobs.report import report_invocations
    from mirrorscan.results.browse import Browser, build_app

    base, dsn = tmp_path_factory.mktemp("report-style"), new_database(pg_dsn)
    root = base / "legacy"
    shutil.copytree(LEGACY_FIXTURE / "experiments", root / "experiments")
    shutil.copytree(LEGACY_FIXTURE / "store", root / "store")
    for manifest in (root / "store").rglob("invocation.json"):
        manifest.write_text(manifest.read_text().replace("@ROOT@", str(root)))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute((LEGACY_FIXTURE / "catalog.sql").read_text().replace("@ROOT@", str(root)))
    (path,) = report_invocations(FINISHED, catalog_dsn=dsn)
    page = Path(path).read_bytes()
    assert b"<style>" in page and b"data:image/png;base64," in page   # the analysis's charts, embedded
    rel = Path(path).relative_to(root / "store" / "legacy_fc" / FINISHED).as_posix()
    browser = Browser(dsn, base / "index")
    route = f"/invocations/{FINISHED}/files/{rel}"
    with world.served(build_app(browser)) as port:
        yield {"url": f"http://127.0.0.1:{port}{route}", "route": route, "file": path, "page": page,
               "app": build_app(browser)}
    browser.close()


def test_the_report_policy_allows_its_own_style_and_data_images_only(site):
    from starlette.testclient import TestClient

    with TestClient(site["app"]) as client:
        response = client.get(site["route"])
    assert response.status_code == 200 and response.content == site["page"]
    policy = response.headers["content-security-policy"]
    directives = {d.split()[0]: d.split()[1:] for d in (p.strip() for p in policy.split(";")) if d}
    styles = re.findall(rb"<style>(.*?)</style>", site["page"], re.DOTALL)
    expected = {"'sha256-" + base64.b64encode(hashlib.sha256(s).digest()).decode() + "'" for s in styles}
    assert set(directives["style-src"]) == expected and "'unsafe-inline'" not in policy
    assert directives["img-src"] == ["'self'", "data:"] and directives["script-src"] == ["'self'"]
    assert "sandbox" in directives and directives["sandbox"] == []   # no allow-scripts
    assert directives["default-src"] == ["'self'"] and directives["object-src"] == ["'none'"]
    # a page that is not a report keeps the strict policy (no inline style, no data: images)
    with TestClient(site["app"]) as client:
        home = client.get("/")
    assert "style-src" not in home.headers["content-security-policy"]
    assert "data:" not in home.headers["content-security-policy"]


@pytest.mark.skipif(not HAVE_CHROMIUM, reason=f"needs Debian's chromium and chromium-driver ({CHROMIUM}, {DRIVER})")
def test_a_served_report_looks_as_it_does_from_its_file(site, tmp_path):
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (the dev extra)")
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,900",
                "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(120)
    probe = ("const b = getComputedStyle(document.body), t = document.querySelector('table'), "
             "h = document.querySelector('h2');"
             "return {font: b.fontFamily, size: b.fontSize, width: b.maxWidth, color: b.color,"
             " collapse: t && getComputedStyle(t).borderCollapse, h2: h && getComputedStyle(h).borderBottomStyle,"
             " images: [...document.images].map(i => [i.complete, i.naturalWidth, i.naturalHeight])};")
    seen = {}
    try:
        for where, url in (("file", Path(site["file"]).as_uri()), ("browse", site["url"])):
            driver.get(url)
            seen[where] = (driver.execute_script(probe), driver.get_screenshot_as_png(),
                           [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"])
    finally:
        driver.quit()
    (styles, shot_file, errors_file), (served, shot_served, errors_served) = seen["file"], seen["browse"]
    assert errors_file == [] and errors_served == [], (errors_file, errors_served)
    assert styles["size"] == "14px" and styles["collapse"] == "collapse"   # the report's own style applied
    assert styles["images"] and all(ok and w > 0 for ok, w, _ in styles["images"])   # every chart loaded
    assert served == styles
    assert shot_served == shot_file   # the same pixels
