#!/usr/bin/env bash
# Serve the checkpoint with sglang so that oc-repl's default --api-base (http://127.0.0.1:30000/v1) reaches it.
#
# Token-exact runs (what training sent, token for token): sglang as below, then
#   oc-repl run --exact --tokenizer "$MODEL" "..."       # the generate wire: POST /generate with token ids
# /generate needs no tool parser: oc-repl renders the template, tokenizes and reads the calls itself.
#
# The chat wire (oc-repl's default): the qwen25 tool parser turns the model's <tool_call> blocks into structured
# tool calls. Note that sglang then renders the prompt itself (rewriting the tools) and may constrain decoding of
# strict tools; pass NO_TOOL_PARSER=1 to serve without it (oc-repl then reads the calls from the text).
set -euo pipefail
MODEL=${MODEL:-/models/Qwen3-8B-OpenClaw-RL-iter215}
parser=(--tool-call-parser qwen25)
[ -n "${NO_TOOL_PARSER:-}" ] && parser=()
exec python -m sglang.launch_server \
  --model-path "$MODEL" \
  --served-model-name qwen3-8b-openclaw-rl \
  --host 127.0.0.1 --port 30000 \
  "${parser[@]}" \
  --context-length 16384 \
  "$@"
