"""Benchmarks of kopf-scheduler: results go to ``bench/results/`` and are reported in ``docs/benchmarks.md``."""
