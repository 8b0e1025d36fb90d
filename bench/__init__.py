"""Benchmarks of volunteer-stream. ``python -m bench`` runs the suite and prints one table
(docs/performance.md); each ``bench/*_bench.py`` also runs on its own. They print figures and
assert nothing: speed is measured here, never in the tests."""
