"""Speed machinery wrapped around the engine, changing no result: event skipping
(:class:`~simulator.fast.replica.SkippingReplica`, stretch planning in :mod:`~simulator.fast.skipping`)
and replicas run one by one or in worker processes (:mod:`~simulator.fast.partitioned`).
"""
