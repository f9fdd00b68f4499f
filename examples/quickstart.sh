#!/usr/bin/env bash
# The main job end to end on any machine: one task, run by oc-repl, judged by a verifier.
# With a model server at $OPENAI_BASE_URL (or sglang's default address) it uses that server. Without one it
# builds and starts the tiny CPU model of examples/tiny-model/ (first time: ~5 min, it compiles llama.cpp) —
# a PLUMBING DEMO: a 135M model does not solve tasks, so expect the verifier to fail and the turn cap to hit.
# Exits 0 when oc-repl reached an outcome (exit 0, 1, 3 or 4: see the README), otherwise with its exit code.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
API=${OPENAI_BASE_URL:-http://127.0.0.1:30000/v1}
WORK=$(mktemp -d)
SERVER_PID=""
trap '[ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; rm -rf "$WORK"' EXIT

if ! python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/models', timeout=3)" "$API" 2>/dev/null
then
  PORT=${PORT:-8000}
  API="http://127.0.0.1:$PORT/v1"
  echo "quickstart: no model server at ${OPENAI_BASE_URL:-http://127.0.0.1:30000/v1}; starting the tiny demo model" >&2
  PORT=$PORT bash "$HERE/tiny-model/serve.sh" >"$WORK/server.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 1200); do  # the first start builds the model's venv
    python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/models', timeout=2)" "$API" \
      2>/dev/null && break
    kill -0 "$SERVER_PID" 2>/dev/null || { tail -n 20 "$WORK/server.log" >&2; exit 5; }
    sleep 1
  done
  EXTRA=(--max-turns 3 --temperature 0)
fi

echo "quickstart: the model's commands run on this machine, as you, starting in $WORK/sandbox (--yes below)" >&2
set +e
oc-repl run --api-base "$API" --sandbox "local:$WORK/sandbox" --yes "${EXTRA[@]+"${EXTRA[@]}"}" \
  --verify "test -f hello.txt" "Create hello.txt containing Hello"
code=$?
set -e
echo "quickstart: oc-repl exited $code" >&2
case $code in 0 | 1 | 3 | 4) exit 0 ;; *) exit "$code" ;; esac
