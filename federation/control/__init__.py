"""The control loop: the leader lease, the job cache that follows the event log, the scheduler that decides over
it (the pure core is `federation.scheduling`), the history's archiving, and what a replica remembers between
cycles (clusters' rejections, drift)."""
