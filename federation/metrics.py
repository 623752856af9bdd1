"""Prometheus metrics of the federation server (served on --metrics-listen)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

CYCLE_SECONDS = Histogram("federation_scheduler_cycle_seconds", "Duration of one scheduling cycle.",
                          buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
CYCLE_STEP_SECONDS = Histogram("federation_scheduler_cycle_step_seconds",
                               "Duration of each step of a scheduling cycle: snapshot, decide, write, explain.",
                               ["step"], buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
JOBS_SCHEDULED = Counter("federation_jobs_scheduled_total", "Jobs dispatched to a member cluster.")
JOBS_PREEMPTED = Counter("federation_jobs_preempted_total", "Running jobs preempted or reclaimed.")
QUEUE_PENDING = Gauge("federation_queue_pending_jobs", "Jobs waiting in a queue.", ["queue"])
QUEUE_DOMINANT_SHARE = Gauge("federation_queue_dominant_share",
                             "Largest share of its deserved resources a queue uses.", ["queue"])
QUEUE_USAGE = Gauge("federation_queue_usage", "What each queue's running jobs hold, by resource (and "
                    "resource@flavor), canonical units (cpu in millicores).", ["queue", "resource"])
QUEUE_DESERVED = Gauge("federation_queue_deserved", "Each queue's deserved share, by resource (and resource@flavor), "
                       "canonical units.", ["queue", "resource"])
CLUSTER_UTILISATION = Gauge("federation_cluster_utilisation", "Used / allocatable per resource.",
                            ["cluster", "resource"])


def serve(address: str) -> int:
    """Serve /metrics at HOST:PORT (port 0 picks one); returns the port."""
    host, _, port = address.rpartition(":")
    server, _ = start_http_server(int(port), addr=host or "0.0.0.0")
    return int(server.server_address[1])
