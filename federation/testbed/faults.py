"""Hardware faults for the test bed, written to its API server the way NVSentinel writes them.

A degraded node gets a condition saying why (`SysLogsXIDError`, or `SysLogsSXIDError` for an NVSwitch SXID),
status True; a failed node `SysLogsGPUFallenOff` and NVSentinel's quarantine taint `nvidia.com/gpu-error`
(NoSchedule); a healthy one has them False and the taint gone. A HyperNode's links degrade through a
`LinkDegraded` condition on its status. KWOK leaves both alone once its nodes are Ready, so they stay as
written. `python -m federation.testbed.faults --kubeconfig K SCHEDULE.yaml` plays a fault schedule
(member_agent.faults) against a cluster, each fault at its time.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import click
from kubernetes import client, config

from member_agent.faults import Fault, FaultError, load_faults
from member_agent.nodehealth import DEGRADED, FAILED

QUARANTINE_TAINT = "nvidia.com/gpu-error"
HYPERNODE = ("topology.volcano.sh", "v1alpha1", "hypernodes")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _condition(kind: str, on: bool, message: str) -> dict[str, Any]:
    return {"type": kind, "status": "True" if on else "False",
            "reason": f"{kind}{'IsNotHealthy' if on else 'IsHealthy'}",
            "message": message if on else "No Health Failures", "lastHeartbeatTime": _now(),
            "lastTransitionTime": _now()}


def _message(reason: str) -> str:
    """As NVSentinel's syslog health monitor words a condition: the XID's code, the GPU and the kernel's line."""
    kind, _, code = reason.partition(" ")
    if kind.upper() not in ("XID", "SXID") or not code.isdigit():
        return f"{reason} reported by the syslog health monitor"
    return (f"ErrorCode:{code} PCI:0000:17:00 GPU_UUID:GPU-00000000-0000-0000-0000-000000000000 kernel: "
            f"NVRM: {'SXid' if kind.upper() == 'SXID' else 'Xid'} (PCI:0000:17:00): {code}, pid=0, name=<unknown>, "
            f"Recommended Action=NONE;")


def apply(api: client.ApiClient, fault: Fault) -> None:
    """Write one fault to the cluster."""
    if fault.kind == "hypernode":
        reason = re.sub(r"[^A-Za-z0-9]", "", fault.reason.title()) or "LinkDegraded"
        condition = {"type": "LinkDegraded", "status": "True" if fault.state == DEGRADED else "False",
                     "reason": reason if fault.state == DEGRADED else "LinksHealthy",
                     "message": fault.reason or "link errors", "lastTransitionTime": _now()}
        client.CustomObjectsApi(api).patch_cluster_custom_object_status(
            *HYPERNODE, fault.name, {"status": {"conditions": [condition]}})
        return
    core = client.CoreV1Api(api)
    reason = fault.reason or ("XID 79" if fault.state == FAILED else "XID 63")
    sxid = reason.upper().startswith("SXID")
    conditions = [
        _condition("SysLogsSXIDError" if sxid else "SysLogsXIDError", fault.state == DEGRADED, _message(reason)),
        _condition("SysLogsGPUFallenOff", fault.state == FAILED, f"{reason}: GPU has fallen off the bus"),
    ]
    core.patch_node_status(fault.name, {"status": {"conditions": conditions}})
    node = core.read_node(fault.name)
    taints = [t for t in node.spec.taints or [] if t.key != QUARANTINE_TAINT]
    if fault.state == FAILED:
        taints.append(client.V1Taint(key=QUARANTINE_TAINT, value="fatal", effect="NoSchedule"))
    core.patch_node(fault.name, {"spec": {"taints": [api.sanitize_for_serialization(t) for t in taints] or None}})


@click.command()
@click.argument("schedule", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False), required=True,
              help="An admin kubeconfig of the cluster (the test bed's).")
def main(schedule: Path, kubeconfig: str) -> None:
    """Play a fault schedule against a cluster, each fault at its time from now."""
    try:
        faults = load_faults(schedule)
    except FaultError as err:
        raise click.ClickException(str(err)) from err
    api = config.new_client_from_config(kubeconfig)
    start = time.monotonic()
    for fault in faults:
        time.sleep(max(0.0, start + fault.at - time.monotonic()))
        apply(api, fault)
        click.echo(f"{fault.at:g}s: {fault.kind}/{fault.name} {fault.state}" + (f" ({fault.reason})" if fault.reason
                                                                                else ""))


if __name__ == "__main__":
    main()
