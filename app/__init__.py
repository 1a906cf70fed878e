"""Trace Dojo: synthetic GPU traces, the measurements an engineer runs, and scoring of the read."""

__version__ = "0.1.0"
