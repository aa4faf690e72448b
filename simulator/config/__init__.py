"""Configuration, the bottom layer: model and GPU specs and their catalog, the Hugging Face config
reader, precisions, topology, the frozen run config and its one option table, user-facing errors.
Imports nothing from the simulator above it.
"""
