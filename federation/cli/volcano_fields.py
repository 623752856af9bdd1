"""The fields of Volcano's objects, as its CRDs (volcano.sh/apis) define them, and which the federation acts on.

What kubectl does with a field the API server does not know (an error naming it, with `--validate=strict`,
the default), `fedctl` does with a field Volcano does not know: `replica: 2` is a typo, not a field to skip.
A field Volcano knows but the federation does not act on is accepted, and named in one warning.
`tests/test_volcano_fields.py` checks these sets against the CRDs generated from Volcano's Go module, so
they cannot drift from what Volcano accepts.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fields:
    """One object level: the fields the federation acts on, and the other fields Volcano has there."""

    honoured: frozenset[str]
    ignored: frozenset[str] = frozenset()

    @property
    def known(self) -> frozenset[str]:
        return self.honoured | self.ignored


def _f(honoured: str, ignored: str = "") -> Fields:
    return Fields(frozenset(honoured.split()), frozenset(ignored.split()))


# Kubernetes' ObjectMeta: what `kubectl get -o yaml` prints is accepted; the server-set fields mean nothing here.
METADATA = _f("name generateName namespace labels annotations",
              "uid resourceVersion generation creationTimestamp deletionTimestamp deletionGracePeriodSeconds "
              "ownerReferences finalizers managedFields selfLink")
JOB = _f("apiVersion kind metadata spec", "status")
JOB_SPEC = _f("queue priorityClassName minAvailable maxRetry policies networkTopology tasks plugins schedulerName",
              "minSuccess runningEstimate ttlSecondsAfterFinished volumes")
# Volcano Global's HyperJob (training.volcano.sh/v1alpha1): plugins and splitPolicy are reserved there, unused.
HYPERJOB_SPEC = _f("replicatedJobs minAvailable maxDomains", "plugins")
REPLICATED_JOB = _f("name replicas templateSpec clusterNames", "splitPolicy")
TASK = _f("name replicas minAvailable policies partitionPolicy template", "dependsOn maxRetry topologyPolicy")
POLICY = _f("event events action timeout", "exitCode")
NETWORK_TOPOLOGY = _f("mode highestTierAllowed highestTierName")
PARTITION_POLICY = _f("totalPartitions partitionSize minPartitions networkTopology")

# A Volcano Queue's spec: what has a counterpart in the federation's Queue, and what has none (refused,
# naming the field: the federation computes deserved shares itself and places by cluster, not by affinity).
QUEUE_SPEC = Fields(frozenset(["weight", "capability", "guarantee", "reclaimable", "priority", "parent"]),
                    frozenset(["dequeueStrategy"]))  # the federation's queues are served as Volcano's `traverse`
QUEUE_SPEC_REFUSED = {
    "deserved": "the federation computes deserved shares from weights, guarantees and limits; give a guarantee",
    "affinity": "the federation places a queue's jobs by cluster, not by node group affinity",
    "extendClusters": "the federation chooses clusters for every queue; use the job's cluster selector",
    "type": "the federation has one kind of queue",
}

# Fields of Volcano releases newer than the CRDs the test bed generates (volcano.sh/apis v1.14.0): the
# drift test allows exactly these beyond the CRD (none now: v1.14.0 has partitionPolicy and highestTierName).
NEWER_THAN_CRDS: set[tuple[str, str]] = set()
