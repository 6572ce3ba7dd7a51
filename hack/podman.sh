#!/usr/bin/env bash
# podman with the options containers need on machines like the project's build machine; use it in place of
# `podman` (same arguments):
#   hack/podman.sh build -f deploy/docker/Dockerfile --build-arg PYTHON_IMAGE=localhost/phalanx-base:bookworm -t phalanx:dev .
#   hack/podman.sh run --rm phalanx:dev phalanx-queue --help
#
# - runtime: runc (crun fails on hosts with hybrid cgroups v1/v2); PHALANX_PODMAN_RUNTIME overrides it, and
#   without runc installed podman's default is kept.
# - ulimits: podman's default RLIMIT_NOFILE/NPROC for containers (1048576) can exceed the host's hard limits,
#   and then every container fails to start ("error setting rlimits"). build/run/create get the host's hard
#   limits instead, capped (PHALANX_PODMAN_NOFILE / PHALANX_PODMAN_NPROC override them).
set -euo pipefail
global=()
runtime="${PHALANX_PODMAN_RUNTIME:-}"
if [ -z "$runtime" ] && command -v runc >/dev/null 2>&1; then runtime=runc; fi
[ -n "$runtime" ] && global+=(--runtime "$runtime")

cap() {  # min(hard limit, cap); "unlimited" counts as the cap
  local hard="$1" cap="$2"
  if [ "$hard" = unlimited ] || [ "$hard" -gt "$cap" ]; then echo "$cap"; else echo "$hard"; fi
}
case "${1:-}" in
  build|run|create)
    sub="$1"
    shift
    nofile="${PHALANX_PODMAN_NOFILE:-$(cap "$(ulimit -Hn)" 65536)}"
    nproc="${PHALANX_PODMAN_NPROC:-$(cap "$(ulimit -Hu)" 4096)}"
    exec podman "${global[@]}" "$sub" --ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc" "$@"
    ;;
  *)
    exec podman "${global[@]}" "$@"
    ;;
esac
