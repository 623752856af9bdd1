"""Node health from NVIDIA DCGM exporter metrics (a Prometheus endpoint), with thresholds: an optional second
source beside the conditions and taints a health monitor writes, for clusters that run dcgm-exporter only.

Pure: the exposition text in, each node's health out (the worst over its GPUs). dcgm-exporter labels each GPU's
series with the node's name (`Hostname`). The default thresholds, all configuration (`dcgm` in the health
rules file):

- `DCGM_FI_DEV_XID_ERRORS` (the last XID a GPU raised): any XID degrades the node; one of `failedXids`
  (79: fallen off the bus, 48: double-bit ECC, 95: uncontained ECC) fails it;
- ECC double-bit errors and uncorrectable remapped rows degrade; a row-remap failure fails the node;
- NVLink replay errors (a link fault: the node's HyperNode is degraded too) and PCIe replays above 100,
  and thermal throttling above 10 s since boot, degrade.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from member_agent.nodehealth import DEGRADED, FAILED, SOUND, NodeHealth

NODE_LABELS = ("Hostname", "node", "kubernetes_node")  # dcgm-exporter's, then common relabelings
XID = "DCGM_FI_DEV_XID_ERRORS"
FAILED_XIDS = (48, 79, 95)
MAX_XID = 2**16  # XIDs are small numbers (NVIDIA lists them below 200); a larger value is not one


@dataclass(frozen=True)
class Threshold:
    metric: str
    above: float  # the value must exceed this
    state: str  # degraded | failed
    reason: str
    link: bool = False  # a fault of the node's links (its HyperNode degrades too)


DEFAULT_THRESHOLDS = (
    Threshold("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 0, DEGRADED, "ECC double-bit errors"),
    Threshold("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", 0, DEGRADED, "uncorrectable remapped rows"),
    Threshold("DCGM_FI_DEV_ROW_REMAP_FAILURE", 0, FAILED, "row remap failure"),
    Threshold("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", 100, DEGRADED, "NVLink replay errors", link=True),
    Threshold("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 100, DEGRADED, "PCIe replays"),
    Threshold("DCGM_FI_DEV_THERMAL_VIOLATION", 10_000_000, DEGRADED, "thermal throttling"),  # microseconds
)


def _node(labels: Mapping[str, str]) -> str:
    return next((labels[k] for k in NODE_LABELS if labels.get(k)), "")


def dcgm_health(text: str, thresholds: Sequence[Threshold] = DEFAULT_THRESHOLDS,
                failed_xids: Iterable[int] = FAILED_XIDS, failure_rate: float = 0.1,
                skipped: list[str] | None = None) -> dict[str, NodeHealth]:
    """Each node whose GPUs cross a threshold, and how (nodes not named are healthy as far as DCGM says). A
    sample that says nothing (NaN, an XID that is not a whole number an XID can be) is passed over and, with
    `skipped`, described there; an infinite counter is above any threshold.
    ValueError: the text is not Prometheus' exposition format."""
    by_metric = {t.metric: t for t in thresholds}
    fatal = set(failed_xids)
    out: dict[str, NodeHealth] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            node, value = _node(sample.labels), sample.value
            if not node or value != value:  # no node to blame, or NaN
                continue
            gpu = sample.labels.get("gpu", "?")
            if sample.name == XID:
                if value <= 0:
                    continue
                if not value < MAX_XID or value != int(value):
                    if skipped is not None:
                        skipped.append(f"{sample.name} {value!r} of node {node[:63]} GPU {gpu[:16]} is not an XID")
                    continue
                xid = int(value)
                health = NodeHealth(FAILED if xid in fatal else DEGRADED, (f"XID {xid}",), False,
                                    0.0 if xid in fatal else failure_rate)
            else:
                t = by_metric.get(sample.name) or by_metric.get(family.name)
                if t is None or value <= t.above:
                    continue
                health = NodeHealth(t.state, (f"{t.reason} on GPU {gpu}",), t.link,
                                    failure_rate if t.state == DEGRADED else 0.0)
            out[node] = out.get(node, SOUND).worst(health)
    return out
