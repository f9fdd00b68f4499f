#!/usr/bin/env bash
# Serve the checkpoint with vLLM on the port oc-repl expects by default.
# Without --enable-auto-tool-choice vLLM answers tool requests with HTTP 400; hermes parses Qwen3's <tool_call>.
set -euo pipefail
MODEL=${MODEL:-/models/Qwen3-8B-OpenClaw-RL-iter215}
exec vllm serve "$MODEL" \
  --served-model-name qwen3-8b-openclaw-rl \
  --host 127.0.0.1 --port 30000 \
  --enable-auto-tool-choice --tool-call-parser hermes \
  --max-model-len 16384 \
  "$@"
