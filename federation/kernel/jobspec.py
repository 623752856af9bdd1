"""The names a job spec and an agent's report share between the server, which checks them, and the member agent,
which acts on them: annotations both read, Volcano's job plugins and their flags, and the bounds of what an agent
may report. The server's checks of a whole spec stay in `federation.validation`."""

from __future__ import annotations

from collections.abc import Sequence

DEFAULT_MAX_RETRY = 3  # restarts and losses a job may have when its spec does not say (Volcano's default)
MAX_REASON = 1024  # characters of a free-text reason (a cancel's): every reason is listed, watched and replayed

# Annotations the scheduler reads, each a duration: how long the job is expected to run (its expected start
# times and those of the jobs behind it), and how often it saves a checkpoint (what preempting it loses; when the
# agent moves it off degraded hardware).
EXPECTED_DURATION = "federation.dev/expected-duration"
CHECKPOINT_INTERVAL = "federation.dev/checkpoint-interval"
# The longest a job may run, counted from its start; its agent stops it past that and the job fails (Kueue's
# maximumExecutionTimeSeconds, a Job's activeDeadlineSeconds, Slurm's --time). The forecast counts on it.
MAX_RUN_TIME = "federation.dev/max-run-time"
# What its agent does when a job runs past its maximum run time: "fail" (the default, as Kueue deactivates such a
# workload) or "requeue": its pods are stopped and it goes back to its queue to run again elsewhere, counted as a
# retry against its maxRetry (for a job that checkpoints: a slot of so long, then its turn again).
ON_MAX_RUN_TIME = "federation.dev/on-max-run-time"
ON_MAX_RUN_TIME_VALUES = ("fail", "requeue")
# How long after it is sent to a cluster every task's gang minimum of pods must be running; past it, the agent
# deletes the pods and the federation requeues the job with backoff (Kueue's waitForPodsReady). The server's
# --ready-timeout is the default of jobs that do not say.
READY_TIMEOUT = "federation.dev/ready-timeout"
DURATION_ANNOTATIONS = (EXPECTED_DURATION, CHECKPOINT_INTERVAL, MAX_RUN_TIME, READY_TIMEOUT)
# What becomes of a running job whose cluster goes silent past the lost grace: "requeue" (the default) runs
# it elsewhere; "wait" keeps it assigned to that cluster until its agent is back (MultiKueue-style patience
# for jobs that must never run twice, even while an agent is dead).
ON_CLUSTER_LOST = "federation.dev/on-cluster-lost"
ON_CLUSTER_LOST_VALUES = ("requeue", "wait")
# "true": the gang is never placed on degraded hardware (nodes or HyperNodes a health monitor marked), even when
# nothing else fits, and is moved off hardware that degrades under it. Default: degraded only when nothing else fits.
AVOID_DEGRADED = "federation.dev/avoid-degraded"

# Volcano's job plugins the member agent carries out, with the flags each takes (Volcano's own; a
# flag Volcano would log and ignore is refused here, so a typo is not silently lost).
JOB_PLUGINS: dict[str, dict[str, str]] = {  # plugin -> flag -> "bool" | "str" | "int" (a port) | "seconds"
    "env": {},
    "svc": {"publish-not-ready-addresses": "bool", "disable-network-policy": "bool", "inject-hosts-env": "bool"},
    "ssh": {"no-root": "bool", "ssh-key-file-path": "str"},
    "pytorch": {"master": "str", "worker": "str", "port": "int", "wait-master-enabled": "bool",
                "wait-master-timeout": "seconds", "wait-master-image": "str"},
    "mpi": {"master": "str", "worker": "str", "port": "int"},
    "ray": {"head": "str", "headContainer": "str", "worker": "str", "workerContainer": "str", "port": "int",
            "dashboardPort": "int", "clientPort": "int"},
}


def parse_plugin_args(plugin: str, args: Sequence[str]) -> dict[str, str]:
    """A plugin's `--flag[=value]` arguments, as Go's flag package reads them; ValueError names the bad one."""
    flags = JOB_PLUGINS[plugin]
    out: dict[str, str] = {}
    for arg in args:
        name, eq, value = arg.lstrip("-").partition("=")
        if not arg.startswith("-") or name not in flags:
            known = ", ".join(f"--{f}" for f in flags) or "none"
            raise ValueError(f"{arg[:64]!r} is not a flag of the {plugin} plugin (flags: {known})")
        kind = flags[name]
        if kind == "bool":
            if eq and value not in ("true", "false"):
                raise ValueError(f"--{name} is true or false, got {value[:64]!r}")
            value = value if eq else "true"
        elif not eq or not value:
            raise ValueError(f"--{name} needs a value (--{name}=...)")
        elif kind == "int" and not (value.isascii() and value.isdigit() and 0 < int(value) < 65536):
            raise ValueError(f"--{name} must be a port number, got {value[:64]!r}")
        elif kind == "seconds" and not (value.isascii() and value.isdigit() and 0 < int(value) <= 86_400):
            raise ValueError(f"--{name} is a number of seconds (1-86400), got {value[:64]!r}")
        out[name] = value
    return out


# What an agent reports, bounded (the server refuses more, as any bad update):
MAX_REPORTED_HYPERNODES = 1_000  # each HyperNode's free resources, up to this many
# The label pairs its nodes carry, up to this many (else none: the federation then leaves pods' nodeSelectors to
# the agent there), leaving out the label each node has its own value of.
MAX_REPORTED_NODE_LABELS = 1_000
NODE_OWN_LABEL = "kubernetes.io/hostname"
MAX_GPUS_PER_NODE = 1_024  # whole GPUs one node reports (an NVL576 rack as one node would be 576)
