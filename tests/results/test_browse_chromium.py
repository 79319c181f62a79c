"""The browser in a real headless browser: Debian's chromium driven by Selenium through chromium-driver (an
explicit driver path; nothing downloads a browser), against the app served by uvicorn on 127.0.0.1.

Two invocations in one catalog: a real scan of the tiny random model (real Ray, engine, classifier and
inference log) and the synthetic world of ``browse_world`` (two models, and an answer that is a script tag).
Every page visited is checked for console errors. With ``MIRRORSCAN_SCREENSHOTS=<folder>`` the main pages are
also saved there as PNGs (how docs/images/browse-*.png are made).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mirrorscan.cluster.store.traces import open_store
from conftest import new_database

import browse_world as world  # noqa: E402

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
if not (os.path.exists(CHROMIUM) and os.path.exists(DRIVER)):
    pytest.skip(f"needs Debian's chromium and chromium-driver ({CHROMIUM}, {DRIVER}): apt-get install chromium "
                "chromium-driver (.ci/run installs them)", allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (the dev extra)")
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

PAIRS = "pair_id,word_a,word_b\nvodka_whiskey,vodka,whiskey\ncat_dog,cat,dog\n"
SHOTS = os.environ.get("MIRRORSCAN_SCREENSHOTS")


@pytest.fixture(scope="module")
def site(tmp_path_factory, tiny_dir, pg_dsn, ray_local):
    """A real scan and the synthetic world in one catalog, the browser app on uvicorn at 127.0.0.1."""

    from mirrorscan.jobs.scan import run_scan
    from mirrorscan.results.browse import Browser, build_app

    base, dsn = tmp_path_factory.mktemp("chromium"), new_database(pg_dsn)
    exp = base / "fc-browse"
    exp.mkdir()
    (exp / "pairs.csv").write_text(PAIRS)
    (exp / "config.json").write_text(json.dumps({
        "instrument": "forced_choice", "models": [{"model": str(tiny_dir), "label": "tiny"}],
        "forced_choice": {"probe_set": "pairs.csv", "envelopes": ["english_strict", "json_schema"]},
        "max_tokens": 6, "batch_size": 4}))
    scanned = run_scan(str(exp), store=str(base / "scan-store"), catalog_dsn=dsn, quiet=True)
    assert scanned.status == "complete"
    built = world.build(base, dsn)

    browser = Browser(dsn, base / "index")
    with world.served(build_app(browser)) as port:
        yield {"url": f"http://127.0.0.1:{port}", "scan": scanned.invocation_id,
               "scan_store": str(base / "scan-store"), "world": built["invocation_id"], "experiment": "fc-browse"}
    browser.close()


@pytest.fixture(scope="module")
def driver(site, tmp_path_factory):
    """Headless chromium through chromium-driver, its console log kept."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900",
                f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    browser = webdriver.Chrome(service=Service(DRIVER), options=options)
    browser.set_page_load_timeout(120)
    yield browser
    browser.quit()


def console_errors(driver) -> list[str]:
    """Console entries of level SEVERE since the last call (a CSP violation or a failed load is one)."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def replaced(page):
    """A wait condition: ``page`` (the old ``html`` element) is gone. chromedriver reports a node that left the
    document either as stale or, when the new page replaces it mid-check, as an inspector error "Node with given
    id does not belong to the document" (which selenium's ``staleness_of`` lets through as a failure): both mean gone."""
    def gone(_driver) -> bool:
        try:
            page.is_enabled()
            return False
        except StaleElementReferenceException:
            return True
        except WebDriverException as exc:
            if "does not belong to the document" in str(exc):
                return True
            raise
    return gone


def follow(driver, element) -> None:
    """Click a link or button and wait (bounded) until the next page has replaced this one."""
    page = driver.find_element(By.TAG_NAME, "html")
    element.click()
    WebDriverWait(driver, 60).until(replaced(page))


def shot(driver, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(SHOTS) / f"browse-{name}.png"))


def test_pages_load_and_a_cell_opens_its_trace(site, driver):
    driver.get(site["url"] + "/")
    assert driver.title.startswith("experiments")
    follow(driver, driver.find_element(By.LINK_TEXT, site["experiment"]))
    follow(driver, driver.find_element(By.LINK_TEXT, site["scan"]))
    assert "invocation" in driver.title
    follow(driver, driver.find_element(By.LINK_TEXT, "matrix"))
    table = driver.find_element(By.ID, "matrix")
    assert [th.text for th in table.find_elements(By.CSS_SELECTOR, "th.row")] == ["tiny"]
    links = table.find_elements(By.CSS_SELECTOR, "td a")
    assert len(links) == 2    # two pairs
    follow(driver, links[0])
    traces = driver.find_elements(By.CLASS_NAME, "trace-link")
    assert len(traces) == 4   # two envelopes × AB/BA
    probe_id = traces[0].text
    follow(driver, traces[0])
    response = driver.find_element(By.ID, "response").get_attribute("textContent")
    stored = open_store(site["scan_store"]).read(site["experiment"], site["scan"])
    row = next(r for r in stored.to_pylist() if r["probe_id"] == probe_id)
    assert response == row["response"]   # verbatim, leading space and all
    assert driver.find_element(By.ID, "answer-value").text == row["class"]
    assert console_errors(driver) == []


def test_a_filter_narrows_the_matrix(site, driver):
    driver.get(f"{site['url']}/invocations/{site['world']}/matrix")
    rows = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "#matrix th.row")]
    assert rows == world.LABELS
    shot(driver, "matrix")
    Select(driver.find_element(By.ID, "f-answer")).select_by_visible_text("B")
    follow(driver, driver.find_element(By.ID, "apply"))
    assert "answer=B" in driver.current_url
    rows = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "#matrix th.row")]
    assert rows == ["beta"]
    cells = [td.text for td in driver.find_elements(By.CSS_SELECTOR, "#matrix td a")]
    assert cells and all(c.startswith("B") for c in cells)
    assert console_errors(driver) == []


def test_a_script_in_an_answer_is_shown_as_text_and_never_runs(site, driver):
    probe = "beta|cat|dog|english_strict|AB"
    driver.get(f"{site['url']}/invocations/{site['world']}/trace?probe_id={probe.replace('|', '%7C')}&sample=0&attempt=1")
    assert driver.title.startswith(f"trace {probe}") and "pwned" not in driver.title
    assert driver.find_element(By.ID, "response").get_attribute("textContent") == world.SCRIPT_ANSWER
    assert driver.find_elements(By.TAG_NAME, "script") == []
    shot(driver, "trace")
    assert console_errors(driver) == []


def test_a_comparison_of_two_models_renders(site, driver):
    driver.get(f"{site['url']}/compare")
    driver.find_element(By.ID, "f-a").send_keys(site["world"])
    driver.find_element(By.ID, "f-b").send_keys(site["world"])
    follow(driver, driver.find_element(By.ID, "compare"))
    Select(driver.find_element(By.ID, "f-label_b")).select_by_visible_text("beta")
    follow(driver, driver.find_element(By.ID, "compare"))
    sides = driver.find_element(By.ID, "sides").text
    assert "alpha" in sides and "beta" in sides
    cells = [(p, e, o) for p in range(len(world.PAIRS)) for e in world.ENVELOPES for o in world.ORDERINGS]
    same = sum(world.answer_of("alpha", *c)[1] == world.answer_of("beta", *c)[1] for c in cells)
    assert f"{100 * same / len(cells):.1f}% ({same} of {len(cells)} matched cells)" in driver.page_source   # as diff
    assert "hamming" in driver.find_element(By.ID, "instrument-compare").text
    shot(driver, "compare")
    assert console_errors(driver) == []


def test_timing_draws_each_endpoint_of_a_real_scan(site, driver):
    driver.get(f"{site['url']}/invocations/{site['scan']}/timing")
    sections = driver.find_elements(By.CSS_SELECTOR, "section.endpoint")
    assert len(sections) == 1 and "engine://hf/" in sections[0].text
    assert len(driver.find_elements(By.CSS_SELECTOR, "section.endpoint svg")) >= 1
    assert "8 requests" in sections[0].text    # 2 pairs × 2 envelopes × AB/BA
    assert console_errors(driver) == []
    driver.get(f"{site['url']}/invocations/{site['world']}/timing")   # request timing, spread over time
    assert len(driver.find_elements(By.CSS_SELECTOR, "section.endpoint svg polygon.band")) == 2 * len(world.LABELS)
    shot(driver, "timing")
    assert console_errors(driver) == []


def test_the_policy_stops_an_inline_script_even_in_a_served_report(site, driver):
    """A report file is served as the analysis wrote it; an inline script in it is refused by the browser
    under the app's policy (the refusal is the one console error expected here)."""
    store = open_store(str(Path(site["scan_store"]).parent / "store"))
    store.write_analysis(world.EXPERIMENT, site["world"], "report/inline.html",
                         b"<html><head><title>report</title></head><body><p id='p'>report</p>"
                         b"<script>document.title='pwned'</script></body></html>")
    driver.get(f"{site['url']}/invocations/{site['world']}/files/analysis/report/inline.html")
    assert driver.find_element(By.ID, "p").text == "report"
    assert driver.title == "report"
    errors = console_errors(driver)
    # refused by the policy's sandbox directive (no allow-scripts) and by script-src, whichever the browser names
    assert errors and all("sandboxed" in e or "Content Security Policy" in e for e in errors), errors
