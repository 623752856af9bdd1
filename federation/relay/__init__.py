"""The API processes' edges to the agents and watchers: each cluster's stream, the orders relayed from the event
log, pods' logs relayed from member clusters, and the event hub that feeds every watch."""
