#!/usr/bin/env bash
# Build the small Debian image the docker tests and the example tasks run FROM: bookworm minbase with python3,
# pytest, tmux and procps. No container registry is needed: the root filesystem comes from debootstrap (Debian's
# package mirror), and its tarball is cached, so a second build (or a new daemon) only imports it.
#   OC_REPL_TEST_IMAGE  the image's name (oc-repl-test:bookworm, the example tasks' default BASE_IMAGE)
#   OC_REPL_CI_CACHE    where the tarball is kept (default ${XDG_CACHE_HOME:-~/.cache}/oc-repl)
# Needs a docker daemon that answers (DOCKER_HOST is honoured), and root with debootstrap for the first build.
set -euo pipefail
IMAGE=${OC_REPL_TEST_IMAGE:-oc-repl-test:bookworm}
CACHE=${OC_REPL_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/oc-repl}
TARBALL="$CACHE/oc-repl-test-bookworm.tar"
say() { echo "test-image: $*" >&2; }
die() {
  say "$1"
  [ -z "${2:-}" ] || say "fix: $2"
  exit 1
}

command -v docker >/dev/null || die "the docker command is not installed" "apt-get install docker.io"
docker version >/dev/null 2>&1 ||
  die "no docker daemon answers at ${DOCKER_HOST:-the default socket}" \
    "start one (eval \"\$(.ci/dockerd.sh)\" starts one without a network bridge), or export DOCKER_HOST"
if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  say "$IMAGE is present"
  exit 0
fi

if [ ! -s "$TARBALL" ]; then
  [ "$(id -u)" = 0 ] || die "debootstrap needs root to make the image's root filesystem" "sudo -E $0"
  command -v debootstrap >/dev/null || die "debootstrap is not installed" "apt-get install debootstrap"
  mkdir -p "$CACHE"
  ROOT=$(mktemp -d)
  trap 'rm -rf "$ROOT"' EXIT
  say "debootstrap bookworm into $ROOT (a minute or two; log: $CACHE/debootstrap.log)"
  SECONDS=0
  debootstrap --variant=minbase --include=python3,python3-pytest,tmux,procps bookworm "$ROOT" \
    >"$CACHE/debootstrap.log" 2>&1 || {
    tail -n 30 "$CACHE/debootstrap.log" >&2
    die "debootstrap failed after ${SECONDS}s (full log: $CACHE/debootstrap.log)"
  }
  rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/*
  tar -C "$ROOT" -cf "$TARBALL.tmp" . && mv "$TARBALL.tmp" "$TARBALL"
  say "root filesystem cached in $TARBALL after ${SECONDS}s"
fi
docker import -c 'CMD ["sleep", "infinity"]' -c 'ENV LANG=C.UTF-8' "$TARBALL" "$IMAGE" >/dev/null
say "$IMAGE imported from $TARBALL"
