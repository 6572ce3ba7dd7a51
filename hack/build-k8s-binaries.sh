#!/usr/bin/env bash
# Build the kube-apiserver and etcd binaries that Phalanx's integration tests run
# against (see hack/README.md). The versions are pinned in hack/k8s-binaries/go.mod.
#
# Usage: hack/build-k8s-binaries.sh [--with-scheduler] [--force] [--print-dir]
#   --with-scheduler  also build kube-scheduler (not needed by the tests)
#   --force           rebuild even if the binaries are already in the cache
#   --print-dir       only print the cache directory for the pinned version; build nothing
#
# Binaries go to ${PHALANX_K8S_CACHE:-$HOME/.cache/phalanx/k8s}/<k8s-version>/.
# Progress goes to stderr; the last line on stdout is that directory.
#
# Environment: GO (go binary; default: go on PATH, else /usr/local/go/bin/go),
#   PHALANX_K8S_CACHE, PHALANX_BUILD_NICE (default 19), GOMAXPROCS (default 2).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
moddir="$here/k8s-binaries"

with_scheduler=0
force=0
print_dir=0
for arg in "$@"; do
  case "$arg" in
    --with-scheduler) with_scheduler=1 ;;
    --force) force=1 ;;
    --print-dir) print_dir=1 ;;
    -h|--help) sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-k8s-binaries: unknown argument: $arg (try --help)" >&2; exit 2 ;;
  esac
done

die() { echo "build-k8s-binaries: ERROR: $*" >&2; exit 1; }
log() { echo "build-k8s-binaries: $*" >&2; }

# --- pinned versions, read from go.mod (the single place they are pinned) -------------
modversion() {  # modversion <module path> -> version in the require block of go.mod
  awk -v m="$1" '$1 == m && $2 ~ /^v[0-9]/ { print $2; exit }' "$moddir/go.mod"
}
k8s_version="$(modversion k8s.io/kubernetes)"
etcd_version="$(modversion go.etcd.io/etcd/server/v3)"
[[ -n "$k8s_version" ]] || die "no k8s.io/kubernetes requirement found in $moddir/go.mod"
[[ -n "$etcd_version" ]] || die "no go.etcd.io/etcd/server/v3 requirement found in $moddir/go.mod"

cache_root="${PHALANX_K8S_CACHE:-$HOME/.cache/phalanx/k8s}"
outdir="$cache_root/$k8s_version"

if (( print_dir )); then
  echo "$outdir"
  exit 0
fi

# --- what to build ----------------------------------------------------------------------
# name|main package|version recorded in the stamp file
targets=(
  "etcd|go.etcd.io/etcd/server/v3|$etcd_version"
  "kube-apiserver|k8s.io/kubernetes/cmd/kube-apiserver|$k8s_version"
)
if (( with_scheduler )); then
  targets+=("kube-scheduler|k8s.io/kubernetes/cmd/kube-scheduler|$k8s_version")
fi

needs_build() {  # needs_build <name> <version>
  local name="$1" version="$2"
  (( force )) && return 0
  [[ -x "$outdir/$name" ]] || return 0
  [[ "$(cat "$outdir/.$name.version" 2>/dev/null || true)" == "$version" ]] || return 0
  return 1
}

todo=()
for t in "${targets[@]}"; do
  IFS='|' read -r name pkg version <<<"$t"
  if needs_build "$name" "$version"; then
    todo+=("$t")
  else
    log "$name $version already built in $outdir"
  fi
done

if (( ${#todo[@]} == 0 )); then
  echo "$outdir"
  exit 0
fi

# --- toolchain --------------------------------------------------------------------------
GO="${GO:-$(command -v go || true)}"
[[ -n "$GO" ]] || GO=/usr/local/go/bin/go
[[ -x "$GO" ]] || die "go toolchain not found (set GO=/path/to/go); tried '$GO'"
need_go="$(awk '$1 == "go" { print $2; exit }' "$moddir/go.mod")"
have_go="$("$GO" env GOVERSION)" || die "'$GO env GOVERSION' failed"
log "using $GO ($have_go); go.mod needs go >= $need_go"

mkdir -p "$outdir" || die "cannot create cache directory $outdir"
export CGO_ENABLED=0
export GOMAXPROCS="${GOMAXPROCS:-2}"
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=readonly"
nice_level="${PHALANX_BUILD_NICE:-19}"

k8s_minor="${k8s_version#v1.}"; k8s_minor="${k8s_minor%%.*}"
k8s_ldflags=(
  "-X k8s.io/component-base/version.gitVersion=$k8s_version"
  "-X k8s.io/component-base/version.gitMajor=1"
  "-X k8s.io/component-base/version.gitMinor=$k8s_minor"
  "-X k8s.io/component-base/version.gitTreeState=clean"
  "-X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z"
)

start_all=$SECONDS
for t in "${todo[@]}"; do
  IFS='|' read -r name pkg version <<<"$t"
  ldflags="-s -w"
  [[ "$name" == kube-* ]] && ldflags="$ldflags ${k8s_ldflags[*]}"
  tmp="$outdir/.$name.tmp.$$"
  log "building $name $version from $pkg (nice $nice_level, GOMAXPROCS=$GOMAXPROCS) ..."
  start=$SECONDS
  if ! (cd "$moddir" && nice -n "$nice_level" "$GO" build -trimpath -ldflags "$ldflags" -o "$tmp" "$pkg"); then
    rm -f "$tmp"
    die "building $name failed: (cd $moddir && CGO_ENABLED=0 $GO build -trimpath -ldflags '$ldflags' -o $tmp $pkg)"
  fi
  "$tmp" --version >/dev/null 2>&1 || { rm -f "$tmp"; die "built $name but '$tmp --version' fails"; }
  mv -f "$tmp" "$outdir/$name"
  echo "$version" >"$outdir/.$name.version"
  log "built $name in $((SECONDS - start))s: $(du -h "$outdir/$name" | cut -f1)"
done
log "done in $((SECONDS - start_all))s"
echo "$outdir"
