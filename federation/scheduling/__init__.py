"""Scheduling decisions as pure functions over in-memory snapshots (no I/O, no clock)."""
