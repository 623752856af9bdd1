"""The agent's Prometheus metrics, served on its health port (`--health-listen`) beside /healthz and /readyz."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

PLACEMENTS = Counter("member_agent_placements_total", "Gangs the agent was asked to place, by result "
                     "(bound, rejected: no room or binding failed, adopted: found running after a restart).",
                     ["result"])
BIND_SECONDS = Histogram("member_agent_bind_seconds", "From an assignment to every pod of the gang bound.",
                         buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
PODS_BOUND = Counter("member_agent_pods_bound_total", "Pods created and bound (restarted pods included).")
WATCH_RESTARTS = Counter("member_agent_watch_restarts_total", "Watches of the API server started again, by "
                         "resource and cause (ended: the server closed it; expired: 410 Gone, listed again; "
                         "error: the connection or the call failed).", ["resource", "cause"])
INVENTORY_AGE = Gauge("member_agent_inventory_age_seconds", "Seconds since the agent last sent the server "
                      "its inventory (free resources and topology).")
CACHED = Gauge("member_agent_cached_objects", "Objects in the agent's watch caches, by resource.", ["resource"])
ORPHAN_PODS_DELETED = Counter("member_agent_orphan_pods_deleted_total", "Pods of attempts the federation no longer "
                              "runs in this cluster, found by reconciliation and deleted.")
FENCED_GANGS = Counter("member_agent_fenced_gangs_total", "Gangs the agent stopped because it was cut off from "
                       "every federation server for its fence time.")
TRANSIENT_RETRIES = Counter("member_agent_transient_retries_total", "Binds tried again after a transient refusal "
                            "of the API server (429, 5xx, a timeout).")
