"""Trace replay in simulated time through the real scheduling core and the real placement core."""
