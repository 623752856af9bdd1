"""Benchmarks: `make bench` runs them all (`python -m bench.run_all`); results in bench/results/."""
