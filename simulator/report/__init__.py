"""Figures from a finished run: metrics, output tables, benchmark-style (``vllm bench serve``) results,
session and disaggregated-pool summaries, plots. Computed after the run, never inside it.
"""
