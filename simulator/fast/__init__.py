"""Speed machinery wrapped around the engine, changing no result: lockstep decodes over a
policy (:mod:`~simulator.fast.lockstep`, the cohort in :mod:`~simulator.fast.cohort`), each
policy's steady-state rules (:mod:`~simulator.fast.steady`), event skipping
(:class:`~simulator.fast.replica.SkippingReplica`, stretch planning in :mod:`~simulator.fast.skipping`;
an attention-DP replica's ranks together in :mod:`~simulator.fast.dp_group`)
and replicas run one by one or in worker processes (:mod:`~simulator.fast.partitioned`).
"""
