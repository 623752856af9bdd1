"""Node health from NVIDIA dcgm-exporter's metrics: thresholds over the exposition text, and the agent reading a
real HTTP endpoint beside the test bed's API server."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from aiohttp import web

from federation.testbed.cluster import Testbed
from member_agent.dcgm import Threshold, dcgm_health
from member_agent.kube import KubernetesBackend
from member_agent.kubeapi import Kube
from member_agent.nodehealth import DEGRADED, FAILED, HealthConfigError, load_rules
from tests.conftest import REPO
from tests.kubehelp import JOBS, eventually, gpu_cluster, ready_nodes
from tests.processes import BIN

# As dcgm-exporter prints them (default counters, with the node's name in Hostname).
EXPOSITION = """\
# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.
# TYPE DCGM_FI_DEV_XID_ERRORS gauge
DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-0a",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="n0-0-0"} 0
DCGM_FI_DEV_XID_ERRORS{gpu="1",UUID="GPU-0b",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="n0-0-0"} %s
# HELP DCGM_FI_DEV_PCIE_REPLAY_COUNTER Total number of PCIe retries.
# TYPE DCGM_FI_DEV_PCIE_REPLAY_COUNTER counter
DCGM_FI_DEV_PCIE_REPLAY_COUNTER{gpu="0",UUID="GPU-1a",device="nvidia0",modelName="NVIDIA H100",Hostname="n0-1-0"} %s
# HELP DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL Total number of NVLink retries.
# TYPE DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL counter
DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL{gpu="2",UUID="GPU-1c",device="nvidia2",Hostname="n0-1-1"} 3
"""


def test_thresholds_say_which_nodes_are_degraded_or_failed() -> None:
    found = dcgm_health(EXPOSITION % (13, 250))
    assert set(found) == {"n0-0-0", "n0-1-0"}  # 3 NVLink replays are under the threshold of 100
    assert (found["n0-0-0"].state, found["n0-0-0"].reasons) == (DEGRADED, ("XID 13",))
    assert (found["n0-1-0"].state, found["n0-1-0"].reasons) == (DEGRADED, ("PCIe replays on GPU 0",))
    assert dcgm_health(EXPOSITION % (79, 0))["n0-0-0"].state == FAILED  # fallen off the bus
    strict = dcgm_health(EXPOSITION % (0, 0), [Threshold("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", 1, DEGRADED,
                                                         "NVLink replays", link=True)])
    assert strict["n0-1-1"].link and list(strict) == ["n0-1-1"]
    with pytest.raises(ValueError):
        dcgm_health("DCGM_FI_DEV_XID_ERRORS{gpu= 1\n")
    skipped: list[str] = []  # samples that say nothing are passed over, and said
    odd = dcgm_health('DCGM_FI_DEV_XID_ERRORS{gpu="0",Hostname="a"} +Inf\n'
                      'DCGM_FI_DEV_XID_ERRORS{gpu="1",Hostname="b"} 13.5\n'
                      'DCGM_FI_DEV_XID_ERRORS{gpu="2",Hostname="c"} NaN\n'
                      'DCGM_FI_DEV_PCIE_REPLAY_COUNTER{gpu="0",Hostname="d"} +Inf\n', skipped=skipped)
    assert list(odd) == ["d"] and odd["d"].reasons == ("PCIe replays on GPU 0",)
    assert skipped == ["DCGM_FI_DEV_XID_ERRORS inf of node a GPU 0 is not an XID",
                       "DCGM_FI_DEV_XID_ERRORS 13.5 of node b GPU 1 is not an XID"]


def test_the_rules_file_sets_dcgm_thresholds(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text("dcgm:\n  failedXids: [13]\n  thresholds:\n    - {metric: DCGM_FI_DEV_PCIE_REPLAY_COUNTER, "
                     "above: 1000, state: failed, reason: PCIe}\n")
    loaded = load_rules(rules)
    found = dcgm_health(EXPOSITION % (13, 250), loaded.dcgm_thresholds, loaded.failed_xids)
    assert found["n0-0-0"].state == FAILED and "n0-1-0" not in found
    rules.write_text("dcgm:\n  thresholds:\n    - {metric: X, above: lots}\n")
    with pytest.raises(HealthConfigError, match=r"dcgm\.thresholds\[0\]\.above"):
        load_rules(rules)


@pytest.mark.parametrize(("text", "message"), [
    ("dcgm: {thresholds: 5}\n", r"dcgm\.thresholds must be a list"),
    ("dcgm:\n  thresholds:\n    - {metric: X, abvoe: 3}\n", r"dcgm\.thresholds\[0\]: unknown field 'abvoe'"),
    ("dcgm:\n  thresholds:\n    - {metric: X, link: sometimes}\n", r"dcgm\.thresholds\[0\]: reason must be"),
    ("failureRates: 5\n", "failureRates must map"),
])
def test_a_bad_rules_file_stops_the_agent_with_the_field_not_a_traceback(tmp_path: Path, text: str,
                                                                       message: str) -> None:
    """Issue 42 (5): `dcgm: {thresholds: 5}` crashed the agent with a traceback."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(text)
    with pytest.raises(HealthConfigError, match=message):
        load_rules(rules)
    done = subprocess.run([str(BIN / "member-agent"), "--cluster", "c", "--server", "127.0.0.1:9", "--simulate",
                           str(REPO / "examples" / "clusters" / "cpu-small.yaml"), "--health-rules", str(rules)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert re.search(message, done.stderr) and str(rules) in done.stderr, done.stderr


async def test_the_agent_reads_a_dcgm_endpoint_and_its_nodes_follow(kube: Testbed, tmp_path: Path) -> None:
    gpu_cluster(kube)
    values: dict[str, object] = {"xid": 0, "pcie": 0}

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=EXPOSITION % (values["xid"], values["pcie"]), content_type="text/plain")

    app = web.Application()
    app.add_routes([web.get("/metrics", metrics)])
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    config = kube.agent_kubeconfig(tmp_path / "agent.kubeconfig")
    b = KubernetesBackend(await Kube.connect(str(config)), "east", JOBS, "federation-agent", (),
                          dcgm_url=f"http://127.0.0.1:{port}/metrics", dcgm_period=0.2)
    await b.start()
    try:
        await ready_nodes(b, 4)
        assert not b.state.degraded and not b.state.failed
        values.update(xid=79, pcie=500)
        await eventually(lambda: "n0-0-0" in b.state.failed and "n0-1-0" in b.state.degraded, what="DCGM's verdicts")
        assert "n0-0-0" not in b.state.ready  # a failed node is given nothing
        assert b.state.degraded["n0-1-0"].reasons == ("PCIe replays on GPU 0",)
        values.update(xid=0, pcie=0)  # the counters cleared (a GPU reset): healthy again
        await eventually(lambda: not b.state.failed and not b.state.degraded and "n0-0-0" in b.state.ready,
                         what="healthy again")
        values.update(xid="+Inf", pcie=500)  # a sample that is no XID: passed over, the rest still read
        await eventually(lambda: "n0-1-0" in b.state.degraded, what="PCIe read beside an infinite XID")
        assert "n0-0-0" not in b.state.failed
        values.update(xid=79, pcie=0)  # and the polling goes on after it
        await eventually(lambda: "n0-0-0" in b.state.failed and not b.state.degraded, what="polling after +Inf")
    finally:
        await b.stop()
        await runner.cleanup()
