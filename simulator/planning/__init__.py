"""Questions asked of many runs: capacity search (and the bracket-and-bisect search it shares),
token-budget choice, sweeps (local or Ray), the disaggregated split planner and the cheapest-fleet
planner (``simulate plan``).
"""
