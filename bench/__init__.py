"""Benchmarks that print their figures (python -m bench NAME); not timed tests."""
