"""Admission checks (Kueue's AdmissionChecks): names a queue or a flavor lists, each of which a dispatched job must
pass before its cluster is told to run it. `provisioning` is the agents' own (`provisioning.py`); any other is an
external controller's, set through the admin API. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from federation.kernel.hyperjob import HOLD_CHECK

PROVISIONING = "provisioning"  # its gangs may be sent to capacity a cluster's autoscaler can add
AGENTS_CHECKS = (PROVISIONING, HOLD_CHECK)  # carried out by the agent of the job's cluster, not through the API


def waiting_for(checks: Iterable[Mapping[str, Any]]) -> list[str]:
    """The checks, of an attempt's, that hold its order back: every one not READY but `provisioning` and a HyperJob's
    `hyperjob`, which its agent carries out once it has the order."""
    return [c["name"] for c in checks if c["state"] != "READY" and c["name"] not in AGENTS_CHECKS]


def admitted(job: Mapping[str, Any]) -> bool:
    """Whether the job's cluster may be told to run it."""
    return not waiting_for(job.get("admission_checks") or ())
