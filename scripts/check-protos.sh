#!/usr/bin/env bash
# Fails when the committed generated code differs from what protos/ generates now.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
scripts/gen-protos.sh "$tmp"
if ! diff -r -x __init__.py -x __pycache__ "$tmp/phalanx/v1" libs/phalanx/v1; then
  echo "generated code in libs/phalanx/v1 is stale: run 'make protos' and commit the result" >&2
  exit 1
fi
echo "generated protobuf code is up to date"
