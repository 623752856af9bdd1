"""The web dashboard in a real browser (Debian's Chromium, headless, driven through its ChromeDriver) against a
real server with tokens and a simulated member cluster: every page renders real data, a submitted job shows
up and turns Running without a reload, a tenant sees nothing of another's, and the cluster view marks where
a job's pods landed. With DASHBOARD_SCREENSHOTS=DIR the pages are saved there (docs/dashboard/)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from sqlalchemy.engine import URL

from federation.cli.dev import AgentProcess, ServerProcess
from federation.security import certs
from tests.conftest import REPO
from tests.processes import BIN

pytestmark = pytest.mark.e2e

JOB = """apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: {name}
  annotations:
    federation.dev/sim-duration: "600s"
spec:
  queue: {queue}
  minAvailable: 2
  tasks:
  - name: worker
    replicas: 2
    template:
      spec:
        containers:
        - name: main
          image: example
          resources:
            requests:
              cpu: "{cpu}"
"""


@dataclass
class Site:
    server: ServerProcess
    tokens: dict[str, str]  # "admin", and a token per tenant
    tmp: Path

    def fedctl(self, token: str, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([str(BIN / "fedctl"), "--server", self.server.address, *args], capture_output=True,
                              text=True, timeout=60, env={**os.environ, "FEDERATION_TOKEN": token,
                                                          "FEDERATION_CA": str(self.tmp / "certs" / "ca.crt")})
        assert done.returncode == 0, done.stderr
        return done

    def submit(self, tenant: str, name: str, cpu: int = 8) -> str:
        manifest = self.tmp / f"{name}.yaml"
        manifest.write_text(JOB.format(name=name, queue=f"{tenant}-q", cpu=cpu))
        return self.fedctl(self.tokens[tenant], "submit", "-f", str(manifest)).stdout.split()[0].removeprefix("job/")


def patient_wait(browser: object, seconds: float) -> WebDriverWait:
    """A wait that reads the page again when live updates replaced the element it was reading (stale)."""
    return WebDriverWait(browser, seconds, ignored_exceptions=(StaleElementReferenceException,
                                                               NoSuchElementException))


@pytest.fixture
def site(db_url: URL, tmp_path: Path) -> Iterator[Site]:
    url = db_url.render_as_string(hide_password=False)
    tls = tmp_path / "certs"
    certs.write_all(tls, ["cpu"])
    server = ServerProcess("--database-url", url, "--ui-listen", "127.0.0.1:0", "--agent-listen", "127.0.0.1:0",
                           "--tls-cert", str(tls / "server.crt"), "--tls-key", str(tls / "server.key"),
                           "--agent-ca", str(tls / "ca.crt"), secure=True)
    agent = None
    try:
        agent = AgentProcess("cpu", server.agent_address, "--simulate", str(REPO / "examples" / "clusters" /
                                                                             "cpu-small.yaml"),
                             "--tls-ca", str(tls / "ca.crt"), "--tls-cert", str(tls / "cpu.crt"),
                             "--tls-key", str(tls / "cpu.key"))

        def token(*args: str) -> str:
            made = subprocess.run([str(BIN / "federation-server"), "token", "create", *args, "--database-url", url],
                                  capture_output=True, text=True, timeout=60)
            assert made.returncode == 0, made.stderr
            return made.stdout.strip()

        tokens = {"admin": token("--admin", "--name", "ops")}
        built = Site(server, tokens, tmp_path)
        for tenant in ("alpha", "beta"):
            built.fedctl(tokens["admin"], "tenant", "create", tenant)
            built.fedctl(tokens["admin"], "queue", "create", f"{tenant}-q", "--tenant", tenant,
                         *(("--max-run-time", "12h", "--guarantee", "cpu=8", "--lending-limit", "cpu=4")
                           if tenant == "alpha" else ()))
            tokens[tenant] = token("--tenant", tenant, "--name", f"{tenant}-user")
        yield built
    finally:
        if agent is not None:
            agent.stop()
        server.stop()


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, "the browser tests need Debian's chromium and chromium-driver (.ci/run installs them)"
    options = Options()
    options.binary_location = chromium
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--window-size=1400,1000"):
        options.add_argument(flag)
    chrome = webdriver.Chrome(options=options, service=Service(driver))
    try:
        yield chrome
    finally:
        chrome.quit()


def sign_in(browser: webdriver.Chrome, ui: str, token: str) -> None:
    """As a person does: the sign-in form, the token pasted, posted (issue 27 (6): never in a URL)."""
    browser.get(f"{ui}/login")
    browser.find_element(By.NAME, "token").send_keys(token)
    browser.find_element(By.CSS_SELECTOR, "#login button").click()
    WebDriverWait(browser, 30).until(lambda b: "/login" not in b.current_url)


def _shot(browser: webdriver.Chrome, name: str) -> None:
    folder = os.environ.get("DASHBOARD_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(folder) / f"{name}.png"))


def test_the_dashboard_answers_why_a_job_waits_and_where_its_gang_landed(site: Site,
                                                                         browser: webdriver.Chrome) -> None:
    ui = site.server.dashboard
    wait = patient_wait(browser, 30)
    hidden = site.submit("beta", "beta-secret")
    browser.get(f"{ui}/queues")
    assert "401" in browser.find_element(By.ID, "error").text  # no token, nothing shown
    sign_in(browser, ui, site.tokens["alpha"])

    # Queues: alpha's own, with its share; nothing of beta's.
    tenants = [s.get_attribute("data-tenant") for s in browser.find_elements(By.CSS_SELECTOR, "section.tenant")]
    assert tenants == ["alpha"] and "beta" not in browser.page_source

    # Jobs: a job submitted while the page is open appears, then turns Running, without a reload.
    browser.get(f"{ui}/jobs")
    browser.execute_script("window.notReloaded = true;")
    job = site.submit("alpha", "alpha-train")
    row = f"tr[data-job='{job}']"
    wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, f"{row} td.phase")
               and b.find_element(By.CSS_SELECTOR, f"{row} td.phase").text == "Running")
    assert browser.execute_script("return window.notReloaded === true")
    assert hidden not in browser.page_source

    # A job's page: phase, per-cluster explanation, pods and their nodes, the timeline.
    browser.get(f"{ui}/jobs/{job}")
    assert browser.find_element(By.ID, "phase").text == "Running"
    pods = [td.text for td in browser.find_elements(By.CSS_SELECTOR, "table.pods td.node")]
    assert len(pods) == 2 and all(pods)
    timeline = browser.find_element(By.ID, "timeline").text
    assert "Submitted" in timeline and "Dispatched" in timeline and "Running" in timeline

    # Clusters: the job's cluster singled out and its pods' nodes marked.
    browser.find_element(By.CSS_SELECTOR, "#cluster a").click()
    wait.until(lambda b: b.find_elements(By.ID, "highlight"))
    marked = sorted(m.text for m in browser.find_elements(By.CSS_SELECTOR, "mark.job-node"))
    assert marked == sorted(set(pods))
    selected = browser.find_element(By.CSS_SELECTOR, "section.cluster.selected")
    assert selected.get_attribute("data-cluster") == "cpu"
    # The HyperNode tree as a heat map, the gang's HyperNode (and those above it) outlined.
    landed = [e.get_attribute("data-name") for e in selected.find_elements(By.CSS_SELECTOR, "span.hypernode.landed")]
    hypernode = browser.execute_script("return document.getElementById('highlight').innerText")
    assert landed and landed[-1] in hypernode and len(selected.find_elements(By.CSS_SELECTOR, "span.hypernode")) > 1

    # Why a job waits: each cluster and the reason it does not fit there.
    waiting = site.submit("alpha", "alpha-huge", cpu=100)  # pods larger than any node of the cluster
    page = f"{ui}/jobs/{waiting}"
    wait.until(lambda b: b.get(page) or b.find_element(By.ID, "reason").text.startswith("cannot run"))
    why = {tr.find_element(By.CSS_SELECTOR, "td:first-child").text: tr.text
           for tr in browser.find_elements(By.CSS_SELECTOR, "table.explain tbody tr")}
    assert list(why) == ["cpu"] and " no " in f" {why['cpu']} "
    _shot(browser, "job-waiting")

    # Queues again, now that alpha runs a job: its usage against its deserved share, a bar per resource.
    browser.get(f"{ui}/queues")
    queue = browser.find_element(By.CSS_SELECTOR, "tr[data-queue='alpha-q']")
    assert queue.find_element(By.CSS_SELECTOR, "td.running").text == "1"
    assert "cpu 16 / " in queue.find_element(By.CSS_SELECTOR, "div.bar[title='cpu']").text
    assert queue.find_element(By.CSS_SELECTOR, "div.max-run").text == "max run 12h"  # its jobs' default
    assert queue.find_element(By.CSS_SELECTOR, "div.lending").text == "lends at most cpu=4"
    assert queue.find_elements(By.CSS_SELECTOR, "div.history canvas")  # the share's last hour, drawn by uPlot
    # Drawn under the Content-Security-Policy (this site's scripts and styles only): bars painted by our script,
    # and nothing the browser refused.
    assert browser.execute_script("return document.querySelector('tr[data-queue=\"alpha-q\"] span.fill')"
                                  ".style.width").endswith("%")
    refused = [e["message"] for e in browser.get_log("browser") if "Content Security Policy" in e["message"]]
    assert not refused, refused

    # Another tenant's job, asked for by name: refused, as through the API.
    browser.get(f"{ui}/jobs/{hidden}")
    assert browser.find_element(By.ID, "error").text.startswith("404")
