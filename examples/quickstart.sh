#!/usr/bin/env bash
# One task end to end, run by oc-repl in a sandbox that cannot touch this machine, judged by a verifier.
#
# The sandbox, chosen first (without one nothing else is worth waiting for): a fresh container of the test image
# (oc-repl-test:bookworm; no network; removed afterwards) when a docker daemon answers, the image made by
# .ci/test-image.sh if it is missing and can be made here; otherwise a local: directory confined by bubblewrap (the
# rest of the host read-only, no network), installing bubblewrap first when it is missing and this is root with apt-get.
# With neither it stops: it never runs the model's commands unconfined.
# The model: the server at $OPENAI_BASE_URL when that is set (it must answer), else sglang's default address, else
# the tiny CPU model of examples/tiny-model/ (the first time compiles llama.cpp: several minutes) -- a PLUMBING DEMO:
# a 135M model does not solve tasks, so expect the verifier to fail and the turn cap to hit.
# Everything is kept under ${XDG_STATE_HOME:-~/.local/state}/oc-repl/quickstart/<time>/: the transcript, the model
# server's log, the local sandbox directory. Exits 0 when oc-repl reached an outcome (exit 0, 1, 3 or 4: see the
# README), otherwise with oc-repl's exit code (or 1 when the quick start itself could not go on).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
IMAGE=${OC_REPL_TEST_IMAGE:-oc-repl-test:bookworm}
RUN="${XDG_STATE_HOME:-$HOME/.local/state}/oc-repl/quickstart/$(date +%Y%m%d-%H%M%S)-$$"
SERVER_PID=""
trap '[ -z "$SERVER_PID" ] || kill "$SERVER_PID" 2>/dev/null' EXIT

say() { echo "quickstart: $*" >&2; }
die() {
  say "$1"
  [ -z "${2:-}" ] || say "fix: $2"
  exit 1
}
answers() { # answers URL: the OpenAI-compatible server there lists its models (any HTTP answer counts)
  python3 - "$1" <<'EOF' 2>/dev/null
import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(sys.argv[1].rstrip("/") + "/models", timeout=3)
except urllib.error.HTTPError:
    pass
EOF
}

# --- oc-repl, and the interpreter it was installed for (its checks below use oc-repl's own code) -------------------
OC_REPL=$(command -v oc-repl) || die "oc-repl is not on PATH" "pip install . (in this repository)"
PY=$(sed -n '1s/^#! *//p' "$OC_REPL")
"$PY" -c "import oc_repl" 2>/dev/null || PY=python3
"$PY" -c "import oc_repl" 2>/dev/null || die "cannot find the Python that runs $OC_REPL" "pip install . again"
(umask 077 && mkdir -p "$RUN") # the run's records are private, as oc-repl keeps every record
say "oc-repl $("$PY" -c 'import oc_repl; print(oc_repl.__version__)') ($OC_REPL); this run's files: $RUN"

# --- the sandbox -------------------------------------------------------------------------------------------------
docker_answers() { "$PY" -c 'from oc_repl.sandbox.docker import connect; connect().close()' 2>/dev/null; }
image_present() { "$PY" -c 'import sys; from oc_repl.sandbox.docker import connect; connect().images.get(sys.argv[1])' \
  "$IMAGE" 2>/dev/null; }
SANDBOX=""
if docker_answers; then
  if ! image_present; then
    say "a docker daemon answers, but $IMAGE is missing: making it with .ci/test-image.sh (once; a minute or two)"
    bash "$HERE/../.ci/test-image.sh" || say "$IMAGE could not be made (above): trying a confined local: sandbox"
  fi
  if image_present; then
    SANDBOX="docker-image:$IMAGE"
    say "sandbox: $SANDBOX: a fresh container with no network, removed at the end"
  fi
else
  say "no docker daemon answers at ${DOCKER_HOST:-the default socket}"
fi
YES=()
confinable() { # sets why: what confines local: here, or why nothing can
  why=$("$PY" -c 'import sys; from oc_repl.sandbox.confine import check; ok, why = check(); print(why); sys.exit(not ok)')
}
if [ -z "$SANDBOX" ] && ! command -v bwrap >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  # Installing the confinement is part of installing the quick start, as the demo model is: without it nothing runs.
  say "installing bubblewrap, which confines the model's commands (apt-get install bubblewrap; log: $RUN/apt.log)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap; } \
    >"$RUN/apt.log" 2>&1 || say "bubblewrap could not be installed (log: $RUN/apt.log)"
fi
if [ -z "$SANDBOX" ]; then
  confinable ||
    die "no safe sandbox here: no docker (with $IMAGE), and local: cannot be confined ($why)" \
      "apt-get install bubblewrap, or start a docker daemon and run .ci/test-image.sh"
  mkdir -p "$RUN/sandbox"
  SANDBOX="local:$RUN/sandbox"
  YES=(--yes) # consent for a confined directory: oc-repl refuses --yes when it cannot confine
  say "sandbox: $SANDBOX, confined ($why): the rest of the host read-only, a private /tmp, no network"
fi

# --- the model server --------------------------------------------------------------------------------------------
API=${OPENAI_BASE_URL:-http://127.0.0.1:30000/v1}
EXTRA=()
if answers "$API"; then
  say "model server: $API answers"
elif [ -n "${OPENAI_BASE_URL:-}" ]; then
  die "no model server answers at OPENAI_BASE_URL=$OPENAI_BASE_URL" \
    "start it (examples/serve-sglang.sh, examples/serve-vllm.sh), or unset OPENAI_BASE_URL for the tiny demo model"
else
  say "no model server at $API: using the tiny demo model instead (a plumbing demo: it will not solve the task)"
  VENV=$(bash "$HERE/tiny-model/install.sh")
  PORT=${PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
  API="http://127.0.0.1:$PORT/v1"
  say "starting the tiny model server on $API (log: $RUN/server.log)"
  OC_REPL_TINY_VENV=$VENV PORT=$PORT bash "$HERE/tiny-model/serve.sh" >"$RUN/server.log" 2>&1 &
  SERVER_PID=$!
  started=$SECONDS
  until answers "$API"; do
    kill -0 "$SERVER_PID" 2>/dev/null || {
      tail -n 20 "$RUN/server.log" >&2
      die "the tiny model server stopped (log: $RUN/server.log)"
    }
    ((SECONDS - started < 300)) || die "the tiny model server did not answer within 5 minutes (log: $RUN/server.log)"
    sleep 1
  done
  say "the tiny model server answers after $((SECONDS - started))s"
  EXTRA=(--max-turns 3 --temperature 0)
fi

# --- the task ----------------------------------------------------------------------------------------------------
TRANSCRIPT="$RUN/transcript.jsonl"
COMMAND=(oc-repl run --api-base "$API" --sandbox "$SANDBOX" "${YES[@]+"${YES[@]}"}" "${EXTRA[@]+"${EXTRA[@]}"}"
  --transcript "$TRANSCRIPT" --verify "test -f hello.txt" "Create hello.txt containing Hello")
say "running: $(printf '%q ' "${COMMAND[@]}")"
set +e
"${COMMAND[@]}"
code=$?
set -e
case $code in
0) outcome="verified: the task is solved" ;;
1) outcome="the verifier failed although the model said it was done" ;;
3) outcome="the turn cap was reached before the verifier passed" ;;
4) outcome="stopped: a loop or too many unreadable replies" ;;
*) outcome="no outcome (see above)" ;;
esac
say "oc-repl exited $code: $outcome"
say "transcript: $TRANSCRIPT"
say "replay it: oc-repl show $(printf %q "$TRANSCRIPT")"
[ -z "$SERVER_PID" ] || say "model server log: $RUN/server.log"
case $code in 0 | 1 | 3 | 4) exit 0 ;; *) exit "$code" ;; esac
