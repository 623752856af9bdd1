"""Issue 28 (1): a user sees their pods and reads their logs through the federation, without the member
cluster's kubeconfig: `fedctl get pods`, `fedctl logs [-f]`, the dashboard's job page; another tenant cannot.
Real processes: a server with tokens and TLS, a simulated member cluster's agent over mTLS, fedctl, Chromium."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By

from tests.processes import BIN
from tests.test_dashboard import Site, browser, patient_wait, sign_in, site  # noqa: F401  (fixtures)

pytestmark = pytest.mark.e2e


def _fedctl(site: Site, token: str, *args: str) -> subprocess.CompletedProcess[str]:  # noqa: F811
    return subprocess.run([str(BIN / "fedctl"), "--server", site.server.address, *args], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "FEDERATION_TOKEN": token,
                                                      "FEDERATION_CA": str(site.tmp / "certs" / "ca.crt")})


def test_pods_and_logs_through_the_federation(site: Site, browser: webdriver.Chrome) -> None:  # noqa: F811
    alpha, beta = site.tokens["alpha"], site.tokens["beta"]
    job = site.submit("alpha", "alpha-logs")
    deadline = time.monotonic() + 60
    while True:
        pods = json.loads(_fedctl(site, alpha, "get", "pods", job, "-o", "json").stdout or "{}").get("items", [])
        if len(pods) == 2 and all(p.get("phase") == "Running" for p in pods):
            break
        assert time.monotonic() < deadline, pods
        time.sleep(0.5)
    assert sorted(p["name"] for p in pods) == [f"{job}-worker-0", f"{job}-worker-1"]
    assert all(p["node"] for p in pods)

    table = _fedctl(site, alpha, "get", "pods", job).stdout
    assert table.splitlines()[0].split() == ["JOB", "NAME", "NAMESPACE", "TASK", "INDEX", "NODE", "STATUS",
                                             "RESTARTS", "MESSAGE"]
    assert f"{job}-worker-1" in table and "Running" in table

    first = _fedctl(site, alpha, "logs", job)
    assert first.returncode == 0 and f"simulated pod {job}-worker-0 on node" in first.stdout, first.stderr
    second = _fedctl(site, alpha, "logs", job, "worker", "1", "--tail", "1")
    assert second.returncode == 0 and second.stdout.startswith("running for"), second.stdout
    wrong = _fedctl(site, alpha, "logs", job, "worker", "7")
    assert wrong.returncode == 1 and "index: task worker has replicas 0-1, not 7" in wrong.stderr
    other = _fedctl(site, beta, "logs", job)  # another tenant: as if the job did not exist
    assert other.returncode == 1 and "not found" in other.stderr and "simulated" not in other.stdout

    # Followed: lines keep coming from the member cluster while the pod runs, until the reader stops.
    follow = subprocess.Popen([str(BIN / "fedctl"), "--server", site.server.address, "logs", job, "-f"],
                              stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "FEDERATION_TOKEN": alpha,
                                   "FEDERATION_CA": str(site.tmp / "certs" / "ca.crt")})
    try:
        assert follow.stdout is not None
        lines = []
        while not any("still running (2s)" in line for line in lines):
            line = follow.stdout.readline()
            assert line, lines
            lines.append(line)
    finally:
        follow.terminate()
        follow.wait(30)

    # The dashboard's job page: the pods with their phases, each with its log.
    ui = site.server.dashboard
    sign_in(browser, ui, alpha)
    browser.get(f"{ui}/jobs/{job}")
    # Read at once in the page: live updates may replace the table between two WebDriver calls.
    phases, logs = browser.execute_script(
        "return [[...document.querySelectorAll('table.pods tbody tr td.pod-phase')].map(e => e.textContent.trim()),"
        " [...document.querySelectorAll('table.pods tbody tr a.log')].map(a => a.href)]")
    assert phases == ["Running", "Running"]
    browser.get(logs[1])
    patient_wait(browser, 30).until(lambda b: b.find_elements(By.ID, "log"))
    assert f"simulated pod {job}-worker-1" in browser.find_element(By.ID, "log").text
