"""Issue 28 (3): the dashboard on a busy day, in Chromium at 1,280 and 1,920 px: tenant rows with what their
limit holds, one column layout per table, jobs newest first with GPUs, age and run time, counts per phase,
sortable columns, the clusters as a grid with the job's cluster first and fullness in red, a job's YAML, why it
runs where it does, and cancelling it from its page (a POST with the session's CSRF token)."""

from __future__ import annotations

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By

from tests.test_dashboard import Site, _shot, browser, patient_wait, sign_in, site  # noqa: F401  (fixtures)

pytestmark = pytest.mark.e2e


def fits(chrome: webdriver.Chrome) -> bool:
    """Nothing runs off the window: no horizontal scrolling."""
    return bool(chrome.execute_script("return document.documentElement.scrollWidth <= window.innerWidth + 1"))


def test_the_dashboard_on_a_busy_day(site: Site, browser: webdriver.Chrome) -> None:  # noqa: F811
    site.fedctl(site.tokens["admin"], "tenant", "update", "alpha", "--limit", "cpu=16")
    jobs = [site.submit("alpha", f"busy-{i}") for i in range(3)]  # 16 CPUs each: one runs, its limit holds two
    ui, wait = site.server.dashboard, patient_wait(browser, 60)
    sign_in(browser, ui, site.tokens["alpha"])
    for width in (1280, 1920):
        browser.set_window_size(width, 1000)

        browser.get(f"{ui}/queues")
        wait.until(lambda b: b.get(f"{ui}/queues") or b.find_element(
            By.CSS_SELECTOR, "tr.tenant-row[data-tenant='alpha'] td.held").text == "2")
        row = browser.find_element(By.CSS_SELECTOR, "tr.tenant-row[data-tenant='alpha']")
        assert row.find_element(By.CSS_SELECTOR, "td.running").text == "1"
        assert "cpu 16 / 16" in row.find_element(By.CSS_SELECTOR, "div.bar[title='cpu']").text
        assert fits(browser), f"queues at {width}px"
        _shot(browser, f"queues-{width}")

        browser.get(f"{ui}/jobs")
        first = browser.find_element(By.CSS_SELECTOR, "table.jobs tbody tr[data-job]")
        assert first.get_attribute("data-job") == jobs[-1]  # newest first
        counts = {a.get_attribute("data-phase"): a.find_element(By.TAG_NAME, "strong").text
                  for a in browser.find_elements(By.CSS_SELECTOR, "#counts a")}
        assert counts["Running"] == "1" and counts["Pending"] == "2"
        running = browser.find_element(By.CSS_SELECTOR, f"tr[data-job='{jobs[0]}']")
        assert running.get_attribute("class") == "phase-running" and running.find_element(
            By.CSS_SELECTOR, "td.ran").text != "-"
        age = browser.find_element(By.XPATH, "//table[contains(@class,'jobs')]//th[text()='Age']")
        age.click()
        age.click()  # oldest first now: by age, descending
        order = [tr.get_attribute("data-job") for tr in browser.find_elements(By.CSS_SELECTOR, "tbody tr[data-job]")]
        assert order == jobs
        assert fits(browser), f"jobs at {width}px"
        # Issue 42 (9): no phase wraps ("Pendin/g"), no header runs into the next, at 1,280 px too.
        cut = browser.execute_script(
            "const lines = e => { const r = document.createRange(); r.selectNodeContents(e); "
            "  return new Set([...r.getClientRects()].map(x => Math.round(x.top))).size; };"
            "return [...document.querySelectorAll('table.jobs td.phase, table.jobs th')].filter(e => lines(e) > 1 || "
            "  e.scrollWidth > e.clientWidth + 1).map(e => [e.textContent, e.scrollWidth, e.clientWidth])")
        assert cut == [], (width, cut)
        # The two jobs alpha's limit holds wait for the same reason: said once, with its count.
        reasons = browser.find_elements(By.CSS_SELECTOR, "details.waiting-reasons li")
        assert [r.get_attribute("data-count") for r in reasons] == ["2"], [r.text for r in reasons]
        assert "tenant alpha at limit" in reasons[0].text
        # The cluster filter is the server's: the page holds that cluster's jobs, however many others there are.
        browser.get(f"{ui}/jobs?cluster=cpu")
        assert [tr.get_attribute("data-job") for tr in browser.find_elements(
            By.CSS_SELECTOR, "tbody tr[data-job]")] == [jobs[0]]
        counts = {a.get_attribute("data-phase"): a.find_element(By.TAG_NAME, "strong").text
                  for a in browser.find_elements(By.CSS_SELECTOR, "#counts a")}
        assert counts["Running"] == "1" and counts["Pending"] == "0", counts
        browser.get(f"{ui}/jobs")
        _shot(browser, f"jobs-{width}")

        browser.get(f"{ui}/clusters?job={jobs[0]}")
        grid = browser.find_element(By.CSS_SELECTOR, ".clusters-grid")
        assert grid.find_element(By.CSS_SELECTOR, "section.cluster").get_attribute("data-cluster") == "cpu"
        heat = browser.execute_script(
            "return [...document.querySelectorAll('[data-heat]')].map(e => [Number(e.dataset.heat), "
            "getComputedStyle(e).backgroundColor.match(/\\d+/g).slice(0, 3).map(Number)])")
        assert heat
        for free, (red, green, _) in heat:  # full reads as full: red where little is free, green where much is
            assert (red > green) if free < 0.5 else (green > red) if free > 0.5 else True, (free, red, green)
        assert fits(browser), f"clusters at {width}px"
        _shot(browser, f"clusters-{width}")

        browser.get(f"{ui}/jobs/{jobs[0]}")
        here = browser.find_element(By.CSS_SELECTOR, "table.explain tr.here")
        assert here.text.startswith("cpu runs here")
        assert "queue: alpha-q" in browser.execute_script("return document.getElementById('manifest').textContent")
        assert fits(browser), f"job at {width}px"
        _shot(browser, f"job-{width}")

    # Cancelled from its page, by its owner.
    browser.get(f"{ui}/jobs/{jobs[2]}")
    browser.find_element(By.CSS_SELECTOR, "#cancel button").click()
    wait.until(lambda b: b.find_element(By.ID, "phase").text == "Cancelled")
