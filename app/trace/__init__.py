"""The trace: columnar in-memory form, the Kineto export, and the helpers scenarios emit with."""

from app.trace.builder import Kind, KernelInfo, Trace, TraceBuilder

__all__ = ["Kind", "KernelInfo", "Trace", "TraceBuilder"]
