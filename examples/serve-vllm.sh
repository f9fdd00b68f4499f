#!/usr/bin/env bash
# Serve the checkpoint with vLLM on the port oc-repl expects by default.
#
# The completions wire (the prompt rendered and tokenized by oc-repl, training's sampling parameters):
#   oc-repl run --exact --wire completions --tokenizer "$MODEL" "..."
# /v1/completions needs no tool parser; vLLM takes top_k -1, skip_special_tokens and include_stop_str_in_output.
#
# The chat wire (oc-repl's default): without --enable-auto-tool-choice vLLM answers tool requests with HTTP 400;
# hermes parses Qwen3's <tool_call>. vLLM then renders the prompt with its own copy of the template.
set -euo pipefail
MODEL=${MODEL:-/models/Qwen3-8B-OpenClaw-RL-iter215}
exec vllm serve "$MODEL" \
  --served-model-name qwen3-8b-openclaw-rl \
  --host 127.0.0.1 --port 30000 \
  --enable-auto-tool-choice --tool-call-parser hermes \
  --max-model-len 16384 \
  --generation-config vllm \
  "$@"
