"""Text the model writes, as bytes for the processes and files of a sandbox."""

from __future__ import annotations


def command_bytes(text: str) -> bytes:
    """A model's text as bytes for a process: undecodable bytes kept by the sandbox go back as they came, and a lone
    surrogate (a model's JSON may hold `\\ud800`) as the bytes Python would write for it, never an exception."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")
