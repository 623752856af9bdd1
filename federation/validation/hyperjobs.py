"""A HyperJob's sub-jobs, checked as one: they come in one batch, each once, agreeing on what is the HyperJob's."""

from __future__ import annotations

from collections.abc import Sequence

from federation.v1 import common_pb2
from federation.validation.core import Violations, check_name, check_qualified_key

MAX_SUB_JOBS = 64  # sub-jobs of one HyperJob (each goes to a cluster of its own or shares one)
_SHARED = ("name", "parts", "min_available", "max_domains", "cluster_topology", "restart")
RESTARTS = ("", "sub-job", "whole")  # the HyperJob's, not a sub-job's


def check_hyperjobs(v: Violations, specs: Sequence[common_pb2.JobSpec], paths: Sequence[str]) -> None:
    """Every HyperJob of the batch whole in it: `parts` sub-jobs, indexed 0 to parts - 1, each in the same queue and
    saying the same of the HyperJob; bounds within reason."""
    groups: dict[str, list[tuple[common_pb2.JobSpec, str]]] = {}
    for spec, path in zip(specs, paths, strict=True):
        if not spec.HasField("hyperjob"):
            continue
        h, at = spec.hyperjob, f"{path}.hyperjob"
        check_name(v, f"{at}.id", h.id)
        check_name(v, f"{at}.name", h.name)
        if not 1 <= h.parts <= MAX_SUB_JOBS:
            v.add(f"{at}.parts", f"must be between 1 and {MAX_SUB_JOBS}, got {h.parts}")
        if not 0 <= h.index < max(h.parts, 1):
            v.add(f"{at}.index", f"must be between 0 and parts - 1 ({h.parts - 1}), got {h.index}")
        if not 0 <= h.min_available <= h.parts:
            v.add(f"{at}.min_available", f"must be between 0 (all) and parts ({h.parts}), got {h.min_available}")
        if h.max_domains < 0:
            v.add(f"{at}.max_domains", f"must not be negative, got {h.max_domains}")
        for i, cluster in enumerate(h.cluster_names):
            check_name(v, f"{at}.cluster_names[{i}]", cluster)
        if h.restart not in RESTARTS:
            v.add(f"{at}.restart", f"must be sub-job or whole, got {h.restart!r}")
        if h.cluster_topology:
            check_qualified_key(v, f"{at}.cluster_topology", h.cluster_topology)
        if h.id:
            groups.setdefault(h.id, []).append((spec, path))
    for group, members in groups.items():
        first, first_path = members[0]
        for spec, path in members[1:]:
            for name in _SHARED:
                if getattr(spec.hyperjob, name) != getattr(first.hyperjob, name):
                    v.add(f"{path}.hyperjob.{name}", f"differs from {first_path}.hyperjob.{name} of the same HyperJob "
                                                     f"{group!r}")
            if spec.queue != first.queue:
                v.add(f"{path}.queue", f"differs from {first_path}.queue: a HyperJob's sub-jobs share its queue")
        indexes = sorted(s.hyperjob.index for s, _ in members)
        if indexes != list(range(first.hyperjob.parts)):
            v.add(f"{first_path}.hyperjob", f"HyperJob {group!r} has sub-jobs {indexes} in this batch, not each of 0 "
                                            f"to {first.hyperjob.parts - 1} once: its sub-jobs are submitted together")
