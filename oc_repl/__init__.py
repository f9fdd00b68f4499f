"""oc-repl: drive small RL-trained terminal agents behind an OpenAI-compatible API."""

__version__ = "0.1.0"
