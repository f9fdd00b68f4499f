#!/usr/bin/env bash
# Build or reuse the venv that serves the tiny real model, for the opt-in test tests/test_real_model.py.
# Same place as examples/tiny-model/serve.sh uses: $OC_REPL_TINY_VENV, else ~/.cache/oc-repl/tiny-venv.
# Idempotent and quiet: the first build compiles llama.cpp (about 5 minutes on 2 cores), later runs take
# a moment. Prints the venv and the time taken; the build log only when the build fails.
# Run it, or source it to get OC_REPL_TINY_VENV exported (names are prefixed so a sourcing script keeps its own).
set -euo pipefail
tiny_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tiny_started=$SECONDS
tiny_log=$(mktemp)
if ! tiny_venv=$(bash "$tiny_root/examples/tiny-model/install.sh" 2>"$tiny_log"); then
  grep -v "^WARNING: Location" "$tiny_log" | tail -n 40 >&2
  rm -f "$tiny_log"
  echo "tiny model: build failed after $((SECONDS - tiny_started))s" >&2
  exit 1
fi
rm -f "$tiny_log"
export OC_REPL_TINY_VENV=$tiny_venv
echo "tiny model: $OC_REPL_TINY_VENV ready in $((SECONDS - tiny_started))s"
