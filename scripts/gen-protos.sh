#!/usr/bin/env bash
# Regenerates the Python code of protos/ into OUT (default libs/). The proto path equals the import path
# (protos/phalanx/v1/x.proto -> phalanx.v1.x_pb2), so generated modules import each other cleanly.
set -euo pipefail
out="${1:-libs}"
cd "$(dirname "$0")/.."
py="${PYTHON:-python3}"
# protoc finds the mypy plugin (protoc-gen-mypy) beside the Python that has grpc_tools.
PATH="$(dirname "$(command -v "$py")"):$PATH"
"$py" -m grpc_tools.protoc -Iprotos --python_out="$out" --grpc_python_out="$out" --mypy_out="$out" \
  protos/phalanx/v1/*.proto
