"""servesim: a discrete-event simulator of LLM inference serving."""

__version__ = "0.1.0"
