"""Whether a node, and the links of a HyperNode, can be trusted with a gang: healthy, degraded, failed.

Pure. Health is read the way NVIDIA's NVSentinel and Kubernetes' Node Problem Detector publish it: a taint
says a node is bad, a node condition (status True) says why; a Volcano HyperNode's status conditions say
whether its switches and cables are sound. Which condition types and taint keys mean what is configuration
(`HealthRules`, a YAML file); the defaults are NVSentinel's and NPD's names:

- failed: the node must not be given anything (a GPU fell off the bus, a fatal NVSwitch error, a kernel
  deadlock, a read-only root file system, or a taint NVSentinel's fault quarantine applies);
- degraded: it works and may fail (XID and SXID errors, ECC/row-remap, NVLink and PCIe replays, thermal or
  power trouble, a restarting kubelet): used only when nothing healthy fits, and its gangs are moved off;
- some conditions are about links (NVSwitch, NICs): they degrade the node's lowest HyperNode as a whole.

A degraded condition carries the rate at which such a node fails (per hour), which the drain timing weighs.
"""

from __future__ import annotations

import fnmatch
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

HEALTHY, DEGRADED, FAILED = "healthy", "degraded", "failed"
RANK = {HEALTHY: 0, DEGRADED: 1, FAILED: 2}

NVSENTINEL_FAILED = ("SysLogsGPUFallenOff", "GpuNvSwitchFatalWatch")
NVSENTINEL_DEGRADED = ("SysLogsXIDError", "SysLogsSXIDError", "GpuMemWatch", "GpuNvlinkWatch", "GpuPcieWatch",
                       "GpuThermalWatch", "GpuPowerWatch", "GpuInforomWatch", "GpuDriverWatch",
                       "GpuNvSwitchNonFatalWatch")
NPD_FAILED = ("KernelDeadlock", "ReadonlyFilesystem")
NPD_DEGRADED = ("FrequentKubeletRestart", "FrequentContainerdRestart", "FrequentDockerRestart",
                "CorruptDockerOverlay2")
LINK_CONDITIONS = ("SysLogsSXIDError", "GpuNvSwitchFatalWatch", "GpuNvSwitchNonFatalWatch")
FAILED_TAINTS = ("nvidia.com/gpu-error*", "nvidia.com/gpu-xid-error*", "nvidia.com/gpu-fatal*")
DEGRADED_TAINTS = ("nvidia.com/gpu-degraded*",)
DEGRADED_TAINT_VALUES = ("degraded",)  # a failed-taint key with this value says degraded (NVSentinel's pattern)
HYPERNODE_DEGRADED = ("LinkDegraded", "Degraded", "NetworkDegraded")
# A degraded node fails at this rate (per hour) until repaired: an XID or ECC warning is typically
# followed by a hard failure within hours (Meta's Llama 3 report: most interruptions were GPU and HBM faults).
DEFAULT_FAILURE_RATE = 0.1
# How monitors write an XID into a condition's message. NVSentinel: "ErrorCode:79 PCI:0000:ef:00 GPU_UUID:GPU-…
# MESSAGE=NVRM: Xid (PCI:0000:ef:00): 79, pid=0, … Recommended Action=RESTART_BM;" (several such, compacted into
# one message, when a node has had several); the kernel's own line "NVRM: Xid (PCI:0000:cb:00): 13, …" or
# "SXid (PCI:0000:05:00.0): 12028, Non-fatal, …"; people and simpler monitors: "XID 79", "xid=48".
_KERNEL_XID = re.compile(r"\b(S?XID)\s*\(PCI:[^)]*\):\s*(\d+)", re.IGNORECASE)
_ERROR_CODE = re.compile(r"\bErrorCode:(\d+)\b")
_XID = re.compile(r"\b(S?XID)[ :=#-]*(\d+)", re.IGNORECASE)
MAX_XID = 2**16  # larger numbers are not XIDs (SXIDs run to five digits)


class HealthConfigError(ValueError):
    """A health rules file that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class HealthRules:
    failed_conditions: tuple[str, ...] = (*NVSENTINEL_FAILED, *NPD_FAILED)
    degraded_conditions: tuple[str, ...] = (*NVSENTINEL_DEGRADED, *NPD_DEGRADED)
    link_conditions: tuple[str, ...] = LINK_CONDITIONS
    failed_taints: tuple[str, ...] = FAILED_TAINTS  # key globs
    degraded_taints: tuple[str, ...] = DEGRADED_TAINTS
    degraded_taint_values: tuple[str, ...] = DEGRADED_TAINT_VALUES
    hypernode_conditions: tuple[str, ...] = HYPERNODE_DEGRADED  # status True: the HyperNode's links degraded
    failure_rates: Mapping[str, float] = field(default_factory=dict)  # condition type or "XID n" -> per hour
    default_failure_rate: float = DEFAULT_FAILURE_RATE
    # XIDs that fail a node, named in a condition's message or in DCGM's metrics (others degrade it)
    failed_xids: tuple[int, ...] = (48, 79, 95)
    # DCGM exporter metrics, when the agent reads them (member_agent.dcgm): the thresholds
    dcgm_thresholds: tuple[Any, ...] = ()  # dcgm.Threshold; () means dcgm.DEFAULT_THRESHOLDS

    def rate(self, reason: str, condition: str) -> float:
        return self.failure_rates.get(reason, self.failure_rates.get(condition, self.default_failure_rate))


@dataclass(frozen=True)
class NodeHealth:
    state: str = HEALTHY
    reasons: tuple[str, ...] = ()  # short and countable: "XID 79", "GpuNvlinkWatch", "taint nvidia.com/gpu-error"
    link: bool = False  # a fault of the node's links: its lowest HyperNode is degraded as a whole
    failure_rate: float = 0.0  # per hour, while degraded

    def worst(self, other: NodeHealth) -> NodeHealth:
        state = max(self.state, other.state, key=RANK.__getitem__)
        return NodeHealth(state, tuple(dict.fromkeys(self.reasons + other.reasons)), self.link or other.link,
                          max(self.failure_rate, other.failure_rate))


SOUND = NodeHealth()


def xids_of(condition: str, message: str) -> list[tuple[str, int]]:
    """The XIDs (and NVSwitch SXIDs) a condition's message names, in order, each once: ("XID", 79)."""
    sxid = "SXID" in condition  # SysLogsSXIDError; SysLogsXIDError reads "sXID"
    found = [(kind.upper(), int(n)) for kind, n in _KERNEL_XID.findall(message)]
    if "XID" in condition:  # NVSentinel's ErrorCode is the XID in its XID conditions only
        found += [("SXID" if sxid else "XID", int(n)) for n in _ERROR_CODE.findall(message)]
    if not found:
        found = [(kind.upper(), int(n)) for kind, n in _XID.findall(message)]
    return [x for x in dict.fromkeys(found) if x[1] < MAX_XID]


def _condition_health(kind: str, message: str, rules: HealthRules) -> NodeHealth:
    """A True condition of a type the rules name: failed by its type, or by an XID it names that fails a node
    (48 double-bit ECC, 79 fallen off the bus, 95 uncontained ECC by default); else degraded. Its reasons are
    the XIDs it names (those that fail the node first), else its type."""
    xids = xids_of(kind, message)
    fatal = [x for x in xids if x[0] == "XID" and x[1] in rules.failed_xids]
    state = FAILED if kind in rules.failed_conditions or fatal else DEGRADED
    reasons = tuple(f"{k} {n}" for k, n in dict.fromkeys(fatal + xids)) or (kind,)
    return NodeHealth(state, reasons, kind in rules.link_conditions,
                      rules.rate(reasons[0], kind) if state == DEGRADED else 0.0)


def node_health(conditions: Iterable[Mapping[str, Any]], taints: Iterable[Mapping[str, Any]],
                rules: HealthRules) -> NodeHealth:
    """A node's health from its status conditions and its taints."""
    health = SOUND
    for c in conditions:
        kind = str(c.get("type", ""))
        if str(c.get("status", "")) != "True":
            continue
        if kind in rules.failed_conditions or kind in rules.degraded_conditions:
            health = health.worst(_condition_health(kind, str(c.get("message", "")), rules))
    for t in taints:
        key, value = str(t.get("key", "")), str(t.get("value", ""))
        if any(fnmatch.fnmatchcase(key, g) for g in rules.failed_taints):
            state = DEGRADED if value in rules.degraded_taint_values else FAILED
        elif any(fnmatch.fnmatchcase(key, g) for g in rules.degraded_taints):
            state = DEGRADED
        else:
            continue
        health = health.worst(NodeHealth(state, (f"taint {key}",), False,
                                         rules.rate(key, key) if state == DEGRADED else 0.0))
    return health


def hypernode_degraded(conditions: Iterable[Mapping[str, Any]], rules: HealthRules) -> str:
    """Why a HyperNode's links are degraded ("" when they are not), from its status conditions."""
    for c in conditions:
        kind = str(c.get("type", ""))
        if kind in rules.hypernode_conditions and str(c.get("status", "")) == "True":
            said = c.get("reason") or kind
            xids = xids_of(said, str(c.get("message", "")))
            return f"{xids[0][0]} {xids[0][1]}" if xids else said
    return ""


def summary(health: Mapping[str, NodeHealth]) -> list[str]:
    """Counted, for people: ["3 nodes degraded (XID 79)", "1 node failed (SysLogsGPUFallenOff)"]."""
    out = []
    for state in (FAILED, DEGRADED):
        nodes = [h for h in health.values() if h.state == state]
        if not nodes:
            continue
        reasons = Counter(r for h in nodes for r in h.reasons[:1])
        said = ", ".join(r for r, _ in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))[:3])
        out.append(f"{len(nodes)} node{'s' if len(nodes) > 1 else ''} {state} ({said})")
    return out


def _strings(data: Mapping[str, Any], section: str, key: str, where: str, default: Sequence[str]) -> tuple[str, ...]:
    part = data.get(section) or {}
    if not isinstance(part, Mapping):
        raise HealthConfigError(f"{where}: {section} must be a mapping (e.g. {section}: {{{key}: [...]}})")
    value = part.get(key)
    if value is None:
        return tuple(default)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise HealthConfigError(f"{where}: {section}.{key} must be a list of strings")
    return tuple(value)


def load_rules(path: Path) -> HealthRules:
    """Rules from a YAML file; every list left out keeps its default (NVSentinel's and NPD's names)."""
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise HealthConfigError(f"{path}: {err}") from None
    if not isinstance(data, Mapping):
        raise HealthConfigError(f"{path}: must be a mapping (conditions, taints, hypernodes, failureRates)")
    unknown = set(data) - {"conditions", "taints", "hypernodes", "failureRates", "failedXids", "dcgm"}
    if unknown:
        raise HealthConfigError(f"{path}: unknown field {sorted(unknown)[0]!r} (conditions, taints, hypernodes, "
                                "failureRates, failedXids, dcgm)")
    xids = {} if "failedXids" not in data else {"failed_xids": _xids(data["failedXids"], f"{path}: failedXids")}
    d = HealthRules()
    rates = data.get("failureRates") or {}
    if not isinstance(rates, Mapping) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in rates.values()):
        raise HealthConfigError(f"{path}: failureRates must map condition types (or 'default') to rates per hour ≥ 0")
    return HealthRules(
        failed_conditions=_strings(data, "conditions", "failed", str(path), d.failed_conditions),
        degraded_conditions=_strings(data, "conditions", "degraded", str(path), d.degraded_conditions),
        link_conditions=_strings(data, "conditions", "link", str(path), d.link_conditions),
        failed_taints=_strings(data, "taints", "failed", str(path), d.failed_taints),
        degraded_taints=_strings(data, "taints", "degraded", str(path), d.degraded_taints),
        degraded_taint_values=_strings(data, "taints", "degradedValues", str(path), d.degraded_taint_values),
        hypernode_conditions=_strings(data, "hypernodes", "degraded", str(path), d.hypernode_conditions),
        failure_rates={str(k): float(v) for k, v in rates.items() if k != "default"},
        default_failure_rate=float(rates.get("default", d.default_failure_rate)),
        **xids, **_dcgm(data.get("dcgm"), str(path)))


def _xids(xids: Any, where: str) -> tuple[int, ...]:
    if not isinstance(xids, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in xids):
        raise HealthConfigError(f"{where} must be a list of XID numbers")
    return tuple(xids)


def _dcgm(data: Any, where: str) -> dict[str, Any]:
    """The dcgm section: {failedXids: [..], thresholds: [{metric, above, state, reason, link}]}."""
    from member_agent.dcgm import Threshold  # the metrics reader depends on these rules, not the reverse

    if data is None:
        return {}
    if not isinstance(data, Mapping) or set(data) - {"failedXids", "thresholds"}:
        raise HealthConfigError(f"{where}: dcgm must be a mapping of failedXids and thresholds")
    out: dict[str, Any] = {}
    if "failedXids" in data:  # as the top-level failedXids (where it was first given: still taken)
        out["failed_xids"] = _xids(data["failedXids"], f"{where}: dcgm.failedXids")
    if "thresholds" in data:
        if not isinstance(data["thresholds"] or [], list):
            raise HealthConfigError(f"{where}: dcgm.thresholds must be a list of {{metric, above, state, reason}}")
        found = []
        for i, t in enumerate(data["thresholds"] or []):
            at = f"{where}: dcgm.thresholds[{i}]"
            if not isinstance(t, Mapping) or not isinstance(t.get("metric"), str):
                raise HealthConfigError(f"{at}: needs metric (a DCGM field name, e.g. DCGM_FI_DEV_PCIE_REPLAY_COUNTER)")
            if unknown := sorted(set(map(str, t)) - {"metric", "above", "state", "reason", "link"}):
                raise HealthConfigError(f"{at}: unknown field {unknown[0]!r} (metric, above, state, reason, link)")
            if not isinstance(t.get("reason", ""), str) or not isinstance(t.get("link", False), bool):
                raise HealthConfigError(f"{at}: reason must be a string and link true or false")
            above = t.get("above", 0)
            if isinstance(above, bool) or not isinstance(above, int | float):
                raise HealthConfigError(f"{at}.above: must be a number")
            if t.get("state", DEGRADED) not in (DEGRADED, FAILED):
                raise HealthConfigError(f"{at}.state: must be degraded or failed")
            found.append(Threshold(t["metric"], float(above), t.get("state", DEGRADED),
                                   str(t.get("reason") or t["metric"]), bool(t.get("link", False))))
        out["dcgm_thresholds"] = tuple(found)
    return out
