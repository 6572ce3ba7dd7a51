#!/usr/bin/env bash
# Podman's Docker-compatible API for `docker compose`, on machines without a Docker engine.
#
#   hack/podman-api.sh start    # start the API service (unless the socket already answers) and a health
#                               # checker; prints DOCKER_HOST=unix://... last
#   hack/podman-api.sh stop     # stop what `start` started (a service it did not start is left alone)
#   hack/podman-api.sh status   # exit 0 when the socket answers
#   hack/podman-api.sh config   # write podman's settings for this machine; print the file's path
#
#   eval "$(hack/podman-api.sh start | tail -1 | sed 's/^/export /')"
#   docker compose up -d --wait     # (compose built by hack/build-compose.sh when docker has no plugin)
#
# The settings (a containers.conf of our own, given to podman through CONTAINERS_CONF, so the machine's
# podman configuration is left as it is) are what Debian 12's podman 4.3 needs where there is no systemd
# and the cgroups are v1 (containers, CI sandboxes):
#   runtime = runc           crun fails on hybrid cgroups; compose cannot pass --runtime (when runc is there)
#   cgroup_manager cgroupfs (without systemd), events_logger file, log_driver k8s-file (no journald needed)
#   default_ulimits          podman's defaults (nofile 1048576) exceed the hard limits a sandbox may have:
#                            the container gets this shell's hard limits (at most 65536 / 32768)
#   network_backend netavark with aardvark-dns: compose's services find each other by name
# Podman schedules healthchecks with systemd timers; without systemd nothing would run them and
# `compose up --wait` / `depends_on: service_healthy` would wait forever, so there `start` also runs a
# checker that calls `podman healthcheck run` for each running container at its healthcheck's interval.
#
# Needs root, podman, runc, netavark, aardvark-dns (apt-get install podman runc netavark aardvark-dns).
# Variables: PHALANX_PODMAN_SOCKET (default /run/podman/podman.sock), PHALANX_PODMAN_STATE (this script's
# files; default ~/.cache/phalanx/podman).
set -euo pipefail
sock="${PHALANX_PODMAN_SOCKET:-/run/podman/podman.sock}"
state="${PHALANX_PODMAN_STATE:-$HOME/.cache/phalanx/podman}"
conf="$state/containers.conf"
log() { echo "podman-api: $*" >&2; }

write_config() {
  mkdir -p "$state"
  local nofile nproc
  nofile="$(ulimit -Hn)"; nproc="$(ulimit -Hu)"
  [ "$nofile" = unlimited ] || [ "$nofile" -gt 65536 ] && nofile=65536
  [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ] && nproc=32768
  # runc where it is installed (else podman's default); cgroupfs unless systemd runs the machine.
  local runtime="" cgroups=""
  command -v runc >/dev/null 2>&1 && runtime='runtime = "runc"'
  has_systemd || cgroups='cgroup_manager = "cgroupfs"'
  local tmp="$conf.tmp.$$"
  cat >"$tmp" <<EOF
# Written by hack/podman-api.sh: podman settings for the compose stack on this machine.
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
log_driver = "k8s-file"

[engine]
$runtime
$cgroups
events_logger = "file"

[network]
network_backend = "netavark"
EOF
  if cmp -s "$tmp" "$conf"; then rm -f "$tmp"; else mv -f "$tmp" "$conf"; fi
}

has_systemd() { [ -d /run/systemd/system ]; }

answers() { curl -fsS --max-time 3 --unix-socket "$sock" http://d/_ping >/dev/null 2>&1; }

alive() {  # pidfile -> 0 when the process it names runs
  [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

# Runs each running container's healthcheck at its interval (podman's own scheduling needs systemd).
health_loop() {
  declare -A due=()
  declare -A running=()
  local misses=0
  # Ends when the API has stopped answering for a while (a busy machine may miss one ping).
  while [ "$misses" -lt 10 ]; do
    if answers; then misses=0; else misses=$((misses + 1)); sleep 1; continue; fi
    local now ids line id interval
    now="$(date +%s)"
    ids="$(podman ps -q --no-trunc 2>/dev/null || true)"
    if [ -n "$ids" ]; then
      # "<id> <interval in ns>" (json: a Go duration's nanoseconds) for containers with a healthcheck; the
      # others print nothing.
      # shellcheck disable=SC2086
      while read -r line; do
        [ -n "$line" ] || continue
        id="${line%% *}"; interval="${line##* }"
        [[ "$interval" =~ ^[0-9]+$ ]] && [ "$interval" -gt 0 ] || interval=30000000000
        if [ -n "${running[$id]:-}" ] && kill -0 "${running[$id]}" 2>/dev/null; then continue; fi
        if [ "${due[$id]:-0}" -le "$now" ]; then
          podman healthcheck run "$id" >/dev/null 2>&1 &
          running[$id]=$!
          due[$id]=$(( now + (interval + 999999999) / 1000000000 ))
        fi
      done < <(podman inspect --format '{{if .Config.Healthcheck}}{{.Id}} {{json .Config.Healthcheck.Interval}}{{end}}' $ids 2>/dev/null || true)
    fi
    sleep 1
  done
}

start() {
  command -v podman >/dev/null || { log "podman is required (apt-get install podman runc netavark aardvark-dns)"; exit 1; }
  write_config
  export CONTAINERS_CONF="$conf"
  if answers; then
    alive "$state/service.pid" || log "the API already answers on $sock (not started by this script: left alone)"
  else
    mkdir -p "$(dirname "$sock")"
    rm -f "$sock"
    setsid podman system service --time=0 "unix://$sock" >>"$state/service.log" 2>&1 </dev/null &
    echo $! >"$state/service.pid"
    for _ in $(seq 1 100); do answers && break; sleep 0.1; done
    answers || { tail -20 "$state/service.log" >&2; log "the API service did not answer on $sock"; exit 1; }
    log "API service started (pid $(cat "$state/service.pid"), log $state/service.log)"
  fi
  if ! has_systemd && ! alive "$state/health.pid"; then
    # Its own session: it outlives this script and is stopped by `stop`.
    setsid bash "$0" health-loop >>"$state/health.log" 2>&1 </dev/null &
    echo $! >"$state/health.pid"
  fi
  echo "DOCKER_HOST=unix://$sock"
}

stop_pidfile() {
  local file="$1"
  if alive "$file"; then
    local pid
    pid="$(cat "$file")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$file"
}

case "${1:-}" in
  start) start ;;
  stop)
    stop_pidfile "$state/health.pid"
    stop_pidfile "$state/service.pid"
    ;;
  status) answers ;;
  config) write_config; echo "$conf" ;;
  health-loop) export CONTAINERS_CONF="$conf"; health_loop ;;
  -h|--help|"") sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; [ -n "${1:-}" ] ;;
  *) log "unknown command: $1 (start, stop, status, config)"; exit 2 ;;
esac
