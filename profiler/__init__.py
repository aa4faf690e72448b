"""servesim profiler: time real kernels with torch (optional extra)."""
