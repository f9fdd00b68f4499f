#!/usr/bin/env bash
# Build or reuse the venv that serves the tiny real model, for the opt-in test tests/test_real_model.py.
# Same place as examples/tiny-model/serve.sh uses: $OC_REPL_TINY_VENV, else ~/.cache/oc-repl/tiny-venv.
# Idempotent: the first build compiles llama.cpp (5 to 15 minutes on 2 cores) and shows its progress and log;
# later runs take a moment. Prints the venv and the time taken.
# Run it, or source it to get OC_REPL_TINY_VENV exported (names are prefixed so a sourcing script keeps its own).
set -euo pipefail
tiny_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tiny_started=$SECONDS
if ! tiny_venv=$(bash "$tiny_root/examples/tiny-model/install.sh"); then
  echo "tiny model: build failed after $((SECONDS - tiny_started))s" >&2
  exit 1
fi
export OC_REPL_TINY_VENV=$tiny_venv
echo "tiny model: $OC_REPL_TINY_VENV ready in $((SECONDS - tiny_started))s"
