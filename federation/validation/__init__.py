"""Request validation, pure: specs in, field violations out, nothing touched.

Every request is checked in full before anything is stored, and every problem is reported
with the path of the field at fault (`spec.tasks[0].replicas`), so a client can point its user
at the exact line. References to stored objects (queue, priority class) are checked by the
servicer, which owns the database; the shapes and numbers are checked here.

A module per concern: `core` (violations, texts, names, labels, quantities), `jobs` (a job's spec), `admin` (the
admin objects), `reports` (what an agent reports). What the rest of the federation uses is named here.
"""

from federation.validation.admin import (
    ADMISSION_CHECK_STATES,
    MAX_PROTECTED_RUN_SECONDS,
    check_admission_checks,
    check_flavor,
    check_priority_class,
    check_queue,
    check_tenant,
)
from federation.validation.core import (
    DEFAULT_QUEUE,
    DEFAULT_TENANT,
    MAX_FIELD,
    MULTILINE,
    Violation,
    Violations,
    check_labels,
    check_name,
    check_object_name,
    check_text,
    clean_text,
    escape_controls,
    text_problem,
    text_violations,
)
from federation.validation.hyperjobs import check_hyperjobs
from federation.validation.jobs import MAX_SPEC_BYTES, CheckedJob, check_job_spec, normalise_job_spec
from federation.validation.reports import (
    MAX_CLUSTER_GPUS,
    MAX_CLUSTER_NODES,
    MAX_HEALTH_SUMMARY,
    inventory_problem,
    pods_problem,
    update_problem,
)

__all__ = [
    "ADMISSION_CHECK_STATES", "DEFAULT_QUEUE", "DEFAULT_TENANT", "MAX_CLUSTER_GPUS", "MAX_CLUSTER_NODES", "MAX_FIELD",
    "MAX_HEALTH_SUMMARY", "MAX_PROTECTED_RUN_SECONDS", "MAX_SPEC_BYTES", "MULTILINE", "CheckedJob", "Violation",
    "Violations", "check_admission_checks", "check_flavor", "check_hyperjobs", "check_job_spec", "check_labels",
    "check_name", "check_object_name", "check_priority_class", "check_queue", "check_tenant", "check_text",
    "clean_text", "escape_controls", "inventory_problem", "normalise_job_spec", "pods_problem", "text_problem",
    "text_violations", "update_problem",
]
