#!/usr/bin/env bash
# Build the helm CLI that tests/deploy/test_deploy_artifacts.py uses to render and lint
# deploy/helm/phalanx, from its Go module (the machines reach the Go module proxy, not
# GitHub release downloads).
#
# Usage: hack/build-helm.sh [--force] [--print-path]
#   --force       rebuild even if the binary is already in the cache
#   --print-path  only print where the binary of the pinned version goes; build nothing
#
# The binary goes to ${PHALANX_TOOLS_CACHE:-$HOME/.cache/phalanx/tools}/helm-<version>/helm.
# Progress goes to stderr; the last line on stdout is the path of the binary.
#
# Environment: HELM_VERSION (default below), GO (go binary; default: go on PATH, else
#   /usr/local/go/bin/go), PHALANX_TOOLS_CACHE, PHALANX_BUILD_NICE (default 19),
#   GOMAXPROCS (default 2).
set -euo pipefail

# Keep in step with HELM_VERSION in tests/deploy/test_deploy_artifacts.py.
HELM_VERSION="${HELM_VERSION:-v3.22.0}"

force=0
print_path=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    --print-path) print_path=1 ;;
    -h|--help) sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-helm: unknown argument: $arg (try --help)" >&2; exit 2 ;;
  esac
done

die() { echo "build-helm: ERROR: $*" >&2; exit 1; }
log() { echo "build-helm: $*" >&2; }

cache_root="${PHALANX_TOOLS_CACHE:-$HOME/.cache/phalanx/tools}"
outdir="$cache_root/helm-$HELM_VERSION"
bin="$outdir/helm"

if (( print_path )); then
  echo "$bin"
  exit 0
fi

if (( ! force )) && [[ -x "$bin" ]] && "$bin" version --short >/dev/null 2>&1; then
  log "helm $HELM_VERSION already built: $bin"
  echo "$bin"
  exit 0
fi

GO="${GO:-$(command -v go || true)}"
[[ -n "$GO" ]] || GO=/usr/local/go/bin/go
[[ -x "$GO" ]] || die "go toolchain not found (set GO=/path/to/go); tried '$GO'"
log "using $GO ($("$GO" env GOVERSION))"

export CGO_ENABLED=0
export GOMAXPROCS="${GOMAXPROCS:-2}"
export GOFLAGS="-buildvcs=false"   # @version installs ignore go.mod files around; no VCS stamping
nice_level="${PHALANX_BUILD_NICE:-19}"

# helm's Makefile stamps the default Kubernetes version of `helm template`/`helm lint`
# (capabilities and deprecation checks) from the client-go version it builds against
# (client-go v0.N -> Kubernetes 1.N); without it helm assumes Kubernetes 1.20.
modfile="$(cd / && "$GO" mod download -json "helm.sh/helm/v3@$HELM_VERSION" \
  | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
[[ -f "$modfile" ]] || die "could not download helm.sh/helm/v3@$HELM_VERSION from the Go module proxy"
client_go="$(awk '$1 == "k8s.io/client-go" && $2 ~ /^v0\./ { print $2; exit }' "$modfile")"
[[ -n "$client_go" ]] || die "no k8s.io/client-go requirement in $modfile"
k8s_minor="$(echo "$client_go" | cut -d. -f2)"
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
ldflags+=" -X helm.sh/helm/v3/internal/version.metadata="
ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
done

mkdir -p "$outdir" || die "cannot create $outdir"
tmpbin="$(mktemp -d "$outdir/.build.XXXXXX")"
trap 'rm -rf "$tmpbin"' EXIT
log "building helm $HELM_VERSION (Kubernetes 1.$k8s_minor defaults; nice $nice_level, GOMAXPROCS=$GOMAXPROCS) ..."
start=$SECONDS
(cd / && GOBIN="$tmpbin" nice -n "$nice_level" "$GO" install -trimpath -ldflags "$ldflags" \
  "helm.sh/helm/v3/cmd/helm@$HELM_VERSION") || die "go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION failed"
"$tmpbin/helm" version --short >/dev/null || die "built helm, but '$tmpbin/helm version' fails"
mv -f "$tmpbin/helm" "$bin"
log "built $("$bin" version --short) in $((SECONDS - start))s: $bin"
echo "$bin"
