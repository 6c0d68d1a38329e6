"""Speed goals as benchmarks (never timed tests). `make bench` runs them; see harness.py."""
