"""A stand-in for NVIDIA's MIG manager and device plugin on KWOK's nodes, which have no GPUs to cut.

As the real pair does: a node whose `nvidia.com/mig.config` label names a configuration not applied yet goes
`nvidia.com/mig.config.state=pending`; after `delay` seconds (the GPUs' reset) its allocatable and capacity publish
the new layout as the mixed strategy's resources (`all-<profile>`: every GPU cut into that profile's slices,
`nvidia.com/gpu` 0; `all-disabled`: whole GPUs again) and the state says `success`; a configuration that is not
of that form, or a profile the GPUs' memory does not have, says `failed`. The node's GPUs are GPU Feature
Discovery's `nvidia.com/gpu.count` label, their memory its `nvidia.com/gpu.memory`.

Run as a process beside the test bed: `python -m federation.testbed.migmanager --kubeconfig admin.kubeconfig`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import click
from kubernetes import client, config

from federation.kernel.resources import GPU, MIG_PROFILE
from member_agent.devices import COUNT_LABEL, memory_mib
from member_agent.mig import CONFIG_LABEL, STATE_LABEL, WHOLE_CONFIG, slices_per_gpu

log = logging.getLogger("migmanager")
APPLIED = "testbed.federation.dev/mig-applied"  # the configuration last applied (the real one keeps it on the GPUs)


def layout(config_name: str, labels: dict[str, str]) -> dict[str, str] | None:
    """The GPU resources a node publishes under this configuration; None if it cannot be applied there."""
    gpus = int(labels.get(COUNT_LABEL, "0") or 0)
    if config_name == WHOLE_CONFIG:
        return {GPU: str(gpus)}
    profile = config_name.removeprefix("all-")
    per_gpu = slices_per_gpu(memory_mib(labels)).get(profile, 0)
    if not config_name.startswith("all-") or not per_gpu or not gpus:
        return None
    return {GPU: "0", f"{MIG_PROFILE}{profile}": str(gpus * per_gpu)}


def step(core: client.CoreV1Api, delay: float, seen: dict[str, float]) -> None:
    """One look at every node: start, finish or fail what its label asks for."""
    for node in core.list_node().items:
        name, labels = node.metadata.name, dict(node.metadata.labels or {})
        annotations = node.metadata.annotations or {}
        wanted = labels.get(CONFIG_LABEL)
        state, applied = labels.get(STATE_LABEL), annotations.get(APPLIED)
        if not wanted or (state == "success" and applied in (None, wanted)) or (
                state == "failed" and applied == f"failed:{wanted}"):  # as asked (a node made so), or given up
            seen.pop(name, None)
            continue
        started = seen.setdefault(name, time.monotonic())
        if state != "pending":
            core.patch_node(name, {"metadata": {"labels": {STATE_LABEL: "pending"}}})
        if time.monotonic() - started < delay:
            continue
        published = layout(wanted, labels)
        if published is None:
            log.info("node %s: cannot apply %s", name, wanted)
            core.patch_node(name, {"metadata": {"labels": {STATE_LABEL: "failed"},
                                                "annotations": {APPLIED: f"failed:{wanted}"}}})
            seen.pop(name, None)
            continue
        status: dict[str, Any] = {  # the old layout's slices go (None deletes them), the new ones come
            field: {**{r: None for r in getattr(node.status, field) or {} if r.startswith(MIG_PROFILE)}, **published}
            for field in ("allocatable", "capacity")}
        core.patch_node_status(name, {"status": status})
        core.patch_node(name, {"metadata": {"labels": {STATE_LABEL: "success"}, "annotations": {APPLIED: wanted}}})
        seen.pop(name, None)
        log.info("node %s: applied %s: %s", name, wanted, published)


@click.command()
@click.option("--kubeconfig", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--delay", default=2.0, show_default=True, help="Seconds a node stays pending (its GPUs' reset).")
@click.option("--period", default=0.5, show_default=True, help="Seconds between looks at the nodes.")
def main(kubeconfig: str, delay: float, period: float) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    core = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
    seen: dict[str, float] = {}
    log.info("MIG manager stand-in watching nodes")
    while True:
        try:
            step(core, delay, seen)
        except client.ApiException as err:  # a conflict or a restart of the API server: look again
            log.warning("%s", err.reason)
        time.sleep(period)


if __name__ == "__main__":
    main()
