"""The phases of a job, as groups the stores and the control loop ask about."""

TERMINAL_PHASES = ("SUCCEEDED", "FAILED", "CANCELLED")
ACTIVE_PHASES = ("DISPATCHED", "RUNNING", "RESTARTING")
WAITING_PHASES = ("PENDING", "PREEMPTED")  # in a queue, waiting to be scheduled
