"""Plain utilities over the config layer: progress on stderr, a worker pool that stops on Ctrl-C,
output paths checked before work and written whole, text formatting, fewer garbage-collector passes while a
simulation runs.
"""
