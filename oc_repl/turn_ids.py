"""The token ids a turn's record holds: on the text wires, the prompt as posted and the reply as generated, with each
generated token's logprob where the server gave it (sglang's /generate). Read by export and by the ATIF trajectory."""

from __future__ import annotations

from typing import Any


def token_ids(body: dict[str, Any], raw: dict[str, Any]) -> dict[str, list[int]]:
    """The ids of a text wire's turn, where the record has them: the prompt as posted, the reply as generated."""
    posted = body.get("json") if isinstance(body, dict) else None
    found: dict[str, list[int]] = {}
    prompt = (posted or {}).get("input_ids", (posted or {}).get("prompt"))
    if isinstance(prompt, list) and all(isinstance(i, int) for i in prompt):
        found["prompt_ids"] = prompt
    output = raw.get("output_ids")
    if isinstance(output, list) and all(isinstance(i, int) for i in output):
        found["output_ids"] = output
        probs = logprobs(raw)
        if probs is not None and [entry[1] for entry in probs] == output:
            found["output_logprobs"] = [entry[0] for entry in probs]
    return found


def logprobs(raw: dict[str, Any]) -> list[list[Any]] | None:
    """sglang's `[logprob, token id, text]` of each generated token: a streamed reply's as the client gathered them,
    an unstreamed one's in its meta_info."""
    found = raw.get("output_token_logprobs", (raw.get("meta_info") or {}).get("output_token_logprobs"))
    ok = isinstance(found, list) and all(isinstance(e, list) and len(e) >= 2 for e in found)
    return found if ok else None
