"""The reference read of any trace: steps, gaps, overlap, kernels, and HTA's metrics."""
