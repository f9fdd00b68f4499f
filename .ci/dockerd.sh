#!/usr/bin/env bash
# A docker daemon for the tests and the example tasks: prints the `export DOCKER_HOST=...` that reaches it, so
#   eval "$(.ci/dockerd.sh)"
# leaves the calling shell pointed at it. A daemon that already answers (at DOCKER_HOST, or the default socket) is
# used as it is. Otherwise one is started as root without a network bridge (containers get no network; nothing
# touches the host's firewall), its state and log under $OC_REPL_CI_CACHE/docker (default
# ${XDG_CACHE_HOME:-~/.cache}/oc-repl/docker). It keeps running after this script; progress goes to stderr.
set -euo pipefail
say() { echo "dockerd: $*" >&2; }
die() {
  say "$1"
  [ -z "${2:-}" ] || say "fix: $2"
  exit 1
}
answers() { docker version --format '{{.Server.Version}}' 2>/dev/null; }

command -v docker >/dev/null || die "the docker command is not installed" "apt-get install docker.io"
if version=$(answers); then
  say "docker $version answers at ${DOCKER_HOST:-the default socket}"
  [ -z "${DOCKER_HOST:-}" ] || echo "export DOCKER_HOST=${DOCKER_HOST@Q}"
  exit 0
fi

CACHE=${OC_REPL_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/oc-repl}
D="$CACHE/docker"
export DOCKER_HOST="unix://$D/docker.sock"
if ! version=$(answers); then
  command -v dockerd >/dev/null || die "dockerd is not installed" "apt-get install docker.io"
  [ "$(id -u)" = 0 ] || die "dockerd runs as root" "eval \"\$(sudo -E $0)\""
  mkdir -p "$D"
  rm -f "$D/docker.sock" "$D/pid"
  say "starting dockerd without a network bridge (state: $D, log: $D/dockerd.log)"
  nohup dockerd --bridge=none --iptables=false --ip-masq=false --data-root "$D/data" --exec-root "$D/exec" \
    -H "$DOCKER_HOST" --pidfile "$D/pid" >"$D/dockerd.log" 2>&1 </dev/null &
  for _ in $(seq 1 240); do
    version=$(answers) && break
    sleep 0.5
  done
  [ -n "${version:-}" ] || {
    tail -n 30 "$D/dockerd.log" >&2
    die "dockerd did not answer within 2 minutes (log: $D/dockerd.log)"
  }
fi
say "docker $version answers at $DOCKER_HOST"
echo "export DOCKER_HOST=${DOCKER_HOST@Q}"
