"""The SimPy simulation: a replica's loop (schedule, price, wait, complete), pipeline stages, the
cluster with its arrivals and router, KV block managers (paged, prefix-caching), the scheduler
policies, disaggregated pools, closed-loop clients and speculative decoding.
"""
