#!/usr/bin/env bash
# Builds Docker Compose v2 (only for `docker compose config` in tests: no Docker engine is needed) from its
# Go module into ${PHALANX_TOOLS_CACHE:-~/.cache/phalanx/tools}/compose-<version>/docker-compose, once.
# `go install` refuses this module (its go.mod has exclude directives), so it is built inside the
# downloaded module instead. Prints the binary's path last.
set -euo pipefail
COMPOSE_VERSION="${COMPOSE_VERSION:-v2.40.3}"
cache="${PHALANX_TOOLS_CACHE:-$HOME/.cache/phalanx/tools}/compose-$COMPOSE_VERSION"
bin="$cache/docker-compose"
log() { echo "build-compose: $*" >&2; }
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
command -v go >/dev/null || { log "Go is required"; exit 1; }
start=$SECONDS
dir="$(go mod download -json "github.com/docker/compose/v2@$COMPOSE_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
[ -n "$dir" ] || { log "go mod download github.com/docker/compose/v2@$COMPOSE_VERSION failed"; exit 1; }
mkdir -p "$cache"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$dir" && GOFLAGS=-mod=mod CGO_ENABLED=0 GOMAXPROCS="${GOMAXPROCS:-2}" nice -n 19 \
  go build -trimpath -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION" \
    -o "$tmp/docker-compose" ./cmd) || { log "go build failed"; exit 1; }
"$tmp/docker-compose" version >/dev/null || { log "built binary does not run"; exit 1; }
mv -f "$tmp/docker-compose" "$bin"
log "built $("$bin" version --short 2>/dev/null || echo "$COMPOSE_VERSION") in $((SECONDS - start))s"
echo "$bin"
