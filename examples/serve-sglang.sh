#!/usr/bin/env bash
# Serve the checkpoint with sglang so that oc-repl's default --api-base (http://127.0.0.1:30000/v1) reaches it.
# The qwen25 tool parser turns the model's <tool_call> blocks into structured tool calls, as in training.
set -euo pipefail
MODEL=${MODEL:-/models/Qwen3-8B-OpenClaw-RL-iter215}
exec python -m sglang.launch_server \
  --model-path "$MODEL" \
  --served-model-name qwen3-8b-openclaw-rl \
  --host 127.0.0.1 --port 30000 \
  --tool-call-parser qwen25 \
  --context-length 16384 \
  "$@"
