#!/usr/bin/env bash
# Build the small Debian image the docker tests and example tasks run FROM (python3, pytest, tmux).
# No registry is reachable, so the root filesystem comes from debootstrap; its tarball is cached outside the repo.
set -euo pipefail
IMAGE=${OC_REPL_TEST_IMAGE:-oc-repl-test:bookworm}
CACHE=${OC_REPL_CI_CACHE:-/var/cache/oc-repl-ci}
TARBALL="$CACHE/oc-repl-test-bookworm.tar"
if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "image $IMAGE present"; exit 0
fi
if [ ! -s "$TARBALL" ]; then
  ROOT=$(mktemp -d)
  debootstrap --variant=minbase --include=python3,python3-pytest,tmux,procps bookworm "$ROOT" >"$CACHE/debootstrap.log" 2>&1 \
    || { tail -n 30 "$CACHE/debootstrap.log"; exit 1; }
  rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/*
  tar -C "$ROOT" -cf "$TARBALL.tmp" . && mv "$TARBALL.tmp" "$TARBALL"
  rm -rf "$ROOT"
fi
docker import -c 'CMD ["sleep", "infinity"]' -c 'ENV LANG=C.UTF-8' "$TARBALL" "$IMAGE" >/dev/null
echo "image $IMAGE imported"
