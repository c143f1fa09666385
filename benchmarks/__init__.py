"""Benchmarks: one script per stage, each timed against the peer at its best in the same run and
printing one JSON line; run from the repository root as ``python -m benchmarks.<name>``. Results
(ratios, with the machine's load) are in BENCHMARKS.md. Never imported by the product or its tests.
"""
