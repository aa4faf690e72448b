"""Where requests come from: length sources, arrival processes, traces (with prefix hashes and
sessions), conversation and agent generators, and the :class:`~simulator.workload.request.Request`
the engine runs.
"""
