"""Offline fitting and reports: learned kernel models from profiles, roofline constants from
profiles and from AIConfigurator's tables, engine overheads from step tables, benchmark JSON and
silicon rows, fidelity and validation reports. Runtime pricing lives in :mod:`simulator.costmodel`.
"""
