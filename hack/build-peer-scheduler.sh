#!/usr/bin/env bash
# Build the peer scheduler that `make bench-k8s` measures Phalanx against: kube-scheduler with the
# scheduler-plugins Coscheduling plugin (hack/peer-scheduler/main.go; versions pinned in its go.mod).
#
# Usage: hack/build-peer-scheduler.sh [--force] [--print-path]
#   --force        rebuild even if the binary is already in the cache
#   --print-path   only print where the binary goes for the pinned versions; build nothing
#
# The binary goes to ${PHALANX_PEER_CACHE:-$HOME/.cache/phalanx/peer-scheduler}/<k8s>-sp<plugins>/peer-scheduler.
# Progress goes to stderr; the last line on stdout is the binary's path. Idempotent: a binary whose
# recorded versions match go.mod is not rebuilt.
#
# Environment: GO (go binary; default: go on PATH, else /usr/local/go/bin/go), PHALANX_PEER_CACHE,
#   PHALANX_BUILD_NICE (default 19), GOMAXPROCS (default 2).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
moddir="$here/peer-scheduler"

force=0
print_path=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    --print-path) print_path=1 ;;
    -h|--help) sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-peer-scheduler: unknown argument: $arg (try --help)" >&2; exit 2 ;;
  esac
done

die() { echo "build-peer-scheduler: ERROR: $*" >&2; exit 1; }
log() { echo "build-peer-scheduler: $*" >&2; }

modversion() {  # modversion <module path> -> the version built: its replace target, else its requirement
  local v
  v="$(awk -v m="$1" '$1 == m && $2 == "=>" && $3 == m && $4 ~ /^v[0-9]/ { print $4; exit }' "$moddir/go.mod")"
  [[ -n "$v" ]] || v="$(awk -v m="$1" '$1 == m && $2 ~ /^v[0-9]/ { print $2; exit }' "$moddir/go.mod")"
  echo "$v"
}
k8s_version="$(modversion k8s.io/kubernetes)"
sp_version="$(modversion sigs.k8s.io/scheduler-plugins)"
[[ -n "$k8s_version" ]] || die "no k8s.io/kubernetes requirement in $moddir/go.mod"
[[ -n "$sp_version" ]] || die "no sigs.k8s.io/scheduler-plugins requirement in $moddir/go.mod"
stamp_value="kubernetes $k8s_version scheduler-plugins $sp_version $(sha256sum "$moddir/main.go" | cut -c1-12)"

cache_root="${PHALANX_PEER_CACHE:-$HOME/.cache/phalanx/peer-scheduler}"
outdir="$cache_root/$k8s_version-sp$sp_version"
bin="$outdir/peer-scheduler"

if (( print_path )); then
  echo "$bin"
  exit 0
fi

if (( ! force )) && [[ -x "$bin" ]] && [[ "$(cat "$outdir/.version" 2>/dev/null || true)" == "$stamp_value" ]]; then
  log "peer-scheduler ($stamp_value) already built: $bin"
  echo "$bin"
  exit 0
fi

GO="${GO:-$(command -v go || true)}"
[[ -n "$GO" ]] || GO=/usr/local/go/bin/go
[[ -x "$GO" ]] || die "go toolchain not found (set GO=/path/to/go); tried '$GO'"
log "using $GO ($("$GO" env GOVERSION))"

mkdir -p "$outdir" || die "cannot create $outdir"
export CGO_ENABLED=0
export GOMAXPROCS="${GOMAXPROCS:-2}"
# -mod=mod: go.sum is committed, but let the go command fill in anything a newer toolchain wants.
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
nice_level="${PHALANX_BUILD_NICE:-19}"

k8s_minor="${k8s_version#v1.}"; k8s_minor="${k8s_minor%%.*}"
ldflags="-s -w"
ldflags+=" -X k8s.io/component-base/version.gitVersion=$k8s_version"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1"
ldflags+=" -X k8s.io/component-base/version.gitMinor=$k8s_minor"
ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
ldflags+=" -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z"

tmp="$outdir/.peer-scheduler.tmp.$$"
log "building peer-scheduler: k8s.io/kubernetes/cmd/kube-scheduler/app $k8s_version +" \
    "sigs.k8s.io/scheduler-plugins/pkg/coscheduling $sp_version (nice $nice_level, GOMAXPROCS=$GOMAXPROCS;" \
    "~10-20 min on 2 cores with a cold build cache) ..."
start=$SECONDS
if ! (cd "$moddir" && nice -n "$nice_level" "$GO" build -trimpath -ldflags "$ldflags" -o "$tmp" .); then
  rm -f "$tmp"
  die "build failed: (cd $moddir && CGO_ENABLED=0 GOFLAGS=-mod=mod $GO build -trimpath -ldflags '$ldflags' -o $tmp .)"
fi
"$tmp" --version >/dev/null 2>&1 || { rm -f "$tmp"; die "built, but '$tmp --version' fails"; }
mv -f "$tmp" "$bin"
echo "$stamp_value" >"$outdir/.version"
log "built peer-scheduler in $((SECONDS - start))s: $(du -h "$bin" | cut -f1) at $bin"
echo "$bin"
