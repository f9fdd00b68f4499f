"""What rendering and tokenizing a prompt on the client costs a turn, against the bare parts measured in the same run.

- tokenizing a 16k-token prompt (a camel-style conversation rendered with the Qwen3 template: system prompt, tools,
  the task, then tool results): the client's Tokenizer the first time it sees the prompt, and on the next turn (the
  same prompt plus one more tool result, its segments remembered), vs the `tokenizers` package encoding the whole
  text at once (what transformers' fast tokenizer does in apply_chat_template);
- rendering that conversation with the chat template vs joining the same ChatML by hand in Python.

The tokenizer is the test tokenizer (Qwen's BPE, tests/tokenizer_support.py: built once from the package index) or
the one in `--model DIR`; the template is the pinned Qwen3 one from ../shared/upstream, else the model folder's.
Goal: a turn's tokenizing <= 20 ms. Median of `--runs` runs each.
Run: python benchmarks/tokenize_cost.py [--runs 20] [--tokens 16000] [--model DIR] [--rows FILE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.rows import Row, add_option, skip, write  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "oc_repl").rglob("*.py"))  # what `cat` shows the model: real, varied text
TOOL = {
    "type": "function",
    "function": {
        "name": "shell_exec",
        "description": "Execute a shell command in a session and return its output.",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {
                "id": {"type": "string"},
                "command": {"type": "string"},
                "block": {"type": ["boolean", "null"]},
            },
            "required": ["id", "command", "block"],
            "additionalProperties": False,
        },
    },
}


def median_ms(work: Callable[[], Any], runs: int, setup: Callable[[], Any] | None = None) -> tuple[float, float]:
    """(median wall ms, median CPU ms of this process): CPU time is less disturbed by other load on the machine."""
    walls, cpus = [], []
    for _ in range(runs):
        if setup is not None:
            setup()
        wall, cpu = time.perf_counter(), time.process_time()
        work()
        walls.append((time.perf_counter() - wall) * 1000)
        cpus.append((time.process_time() - cpu) * 1000)
    return statistics.median(walls), statistics.median(cpus)


def template_source(model: Path) -> str:
    for shared in (ROOT.parent / "shared", ROOT.parent.parent / "shared"):
        pinned = shared / "upstream" / "qwen3" / "chat_template.jinja"
        if pinned.is_file():
            return pinned.read_text()
    from oc_repl.client.chat_template import load_chat_templates
    from oc_repl.errors import UsageError

    try:
        return load_chat_templates(model).select().source
    except UsageError:
        skip("no Qwen3 chat template: neither ../shared/upstream/qwen3 nor a template in the model folder")


def model_folder(given: Path | None, scratch: Path) -> Path:
    if given is not None:
        return given
    try:
        import tokenizers  # noqa: F401

        from tests.tokenizer_support import model_dir

        return model_dir(scratch / "model")
    except ImportError:
        skip("the tokenizers package is not installed (pip install '.[tokens]')")
    except BaseException as exc:  # the test tokenizer's maker skips (a pytest outcome) when the index cannot be had
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        skip(f"no test tokenizer: {exc}")


def tool_output(n: int) -> str:
    return SOURCES[n % len(SOURCES)].read_text()[:3000]


def conversation(tokenizer: Any, render: Callable[[list[dict]], str], tokens: int) -> list[dict[str, Any]]:
    system = (ROOT / "README.md").read_text()[:5800]  # about the size of camel's system prompt
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Task name:t1\nFix the build."}]
    while tokenizer.count(render(messages)) < tokens:
        messages.append({"role": "tool", "tool_call_id": f"c{len(messages)}", "content": tool_output(len(messages))})
    return messages


def chatml(messages: list[dict[str, Any]]) -> str:
    """The same conversation joined by hand (no tools block, no template logic): the floor for rendering."""
    parts = [f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages]
    return "".join(parts) + "<|im_start|>assistant\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=16000, help="prompt size in tokens (default 16000)")
    parser.add_argument("--model", type=Path, help="a model folder (tokenizer.json) instead of the test tokenizer")
    add_option(parser)
    args = parser.parse_args()
    from oc_repl.client.chat_template import ChatTemplates, Template
    from oc_repl.client.tokenizer import Tokenizer, load_tokenizer

    with tempfile.TemporaryDirectory() as scratch:
        folder = model_folder(args.model, Path(scratch))
        started = time.perf_counter()
        tok = load_tokenizer(folder)
        load_ms = (time.perf_counter() - started) * 1000
        data = tok.path.read_text()
        templates = ChatTemplates({"default": Template("default", template_source(folder), "qwen3")})

    def render(messages: list[dict]) -> str:
        return templates.render(messages, [TOOL], add_generation_prompt=True)

    messages = conversation(tok, render, args.tokens)
    prompt = render(messages)
    following = render([*messages, {"role": "tool", "tool_call_id": "next", "content": tool_output(len(messages))}])
    fresh: list[Tokenizer] = []

    def forget() -> None:  # a Tokenizer that has never seen the prompt (the package's own word cache stays warm)
        fresh[:] = [Tokenizer(tok.backend, tok.path, tok.sha256, {})]

    def reload() -> None:  # a tokenizer just loaded: nothing cached anywhere
        import tokenizers

        fresh[:] = [Tokenizer(tokenizers.Tokenizer.from_str(data), tok.path, tok.sha256, {})]

    def remember() -> None:
        forget()
        fresh[0].encode(prompt)

    assert tok.encode(prompt) == tok.backend.encode(prompt, add_special_tokens=False).ids
    whole = median_ms(lambda: tok.backend.encode(prompt, add_special_tokens=False), args.runs)
    first = median_ms(lambda: fresh[0].encode(prompt), args.runs, setup=forget)
    cold_runs = max(1, min(args.runs, 5))  # each needs the tokenizer loaded again
    cold = median_ms(lambda: fresh[0].encode(prompt), cold_runs, setup=reload)
    cold_whole = median_ms(lambda: fresh[0].backend.encode(prompt, add_special_tokens=False), cold_runs, setup=reload)
    turn = median_ms(lambda: fresh[0].encode(following), args.runs, setup=remember)
    rendering = median_ms(lambda: render(messages), args.runs)
    joining = median_ms(lambda: chatml(messages), args.runs)
    n = len(tok.encode(prompt))
    print(
        f"prompt: {n} tokens, {len(prompt)} characters, {len(messages)} messages; tokenizer loaded in {load_ms:.0f} ms"
    )
    print("                                             wall ms   CPU ms")
    for name, (wall, cpu) in (
        ("tokenizers' encode of the whole prompt", whole),
        ("Tokenizer.encode, first time", first),
        ("just loaded: tokenizers' encode", cold_whole),
        ("just loaded: Tokenizer.encode", cold),
        ("Tokenizer.encode, next turn (goal <= 20)", turn),
        ("chat template render", rendering),
        ("ChatML joined by hand", joining),
    ):
        print(f"{name:44s} {wall:8.2f} {cpu:8.2f}")
    baseline = "the tokenizers package encoding the whole prompt"
    size = f"a {n // 1000}k-token prompt"
    rows = [
        Row(f"tokenize {size}, next turn", turn[0], "ms", baseline, whole[0], "<= 20 ms", turn[0] <= 20),
        Row(f"tokenize {size}, first time", first[0], "ms", baseline, whole[0], "<= 20 ms", first[0] <= 20),
        Row(
            f"tokenize {size}, tokenizer just loaded", cold[0], "ms", baseline, cold_whole[0], "<= 20 ms", cold[0] <= 20
        ),
        Row(
            f"render {len(messages)} messages (Qwen3 template)", rendering[0], "ms", "ChatML joined by hand", joining[0]
        ),
        Row("load the tokenizer", load_ms, "ms"),
    ]
    write(rows, args.rows)


if __name__ == "__main__":
    main()
