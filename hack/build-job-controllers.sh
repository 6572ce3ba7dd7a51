#!/usr/bin/env bash
# Build the real job controllers that tests/k8s/test_job_controllers.py runs against the test kube-apiserver:
# Kubeflow's training-operator (the PyTorchJob controller) and kwok (fake nodes whose pods run and finish),
# from their Go modules (see hack/README.md). Versions are pinned in hack/job-controllers/*/go.mod.
#
# Usage: hack/build-job-controllers.sh [--force] [--print-dir]
#   --force       rebuild even if the binaries are already in the cache
#   --print-dir   only print the cache directory for the pinned versions; build nothing
#
# Output in ${PHALANX_JOB_CONTROLLERS_CACHE:-$HOME/.cache/phalanx/job-controllers}/<versions>/:
#   training-operator, kwok, and files copied verbatim from the same module sources:
#   crds/kubeflow.org_pytorchjobs.yaml (training-operator's manifests/base/crds/) and
#   kwok-stages/*.yaml (kwok's kustomize/stage/{node,pod}/fast/ Stages).
# Progress goes to stderr; the last line on stdout is that directory.
#
# Environment: GO (go binary; default: go on PATH, else /usr/local/go/bin/go),
#   PHALANX_JOB_CONTROLLERS_CACHE, PHALANX_BUILD_NICE (default 19), GOMAXPROCS (default 2).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
moddir="$here/job-controllers"

force=0
print_dir=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    --print-dir) print_dir=1 ;;
    -h|--help) sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-job-controllers: unknown argument: $arg (try --help)" >&2; exit 2 ;;
  esac
done

die() { echo "build-job-controllers: ERROR: $*" >&2; exit 1; }
log() { echo "build-job-controllers: $*" >&2; }

modversion() {  # modversion <dir> <module path> -> version in the require block of <dir>/go.mod
  awk -v m="$2" '($1 == m && $2 ~ /^v[0-9]/) { print $2; exit } ($1 == "require" && $2 == m) { print $3; exit }' \
    "$moddir/$1/go.mod"
}
to_module=github.com/kubeflow/training-operator
kwok_module=sigs.k8s.io/kwok
to_version="$(modversion training-operator "$to_module")"
kwok_version="$(modversion kwok "$kwok_module")"
[[ -n "$to_version" ]] || die "no $to_module requirement in $moddir/training-operator/go.mod"
[[ -n "$kwok_version" ]] || die "no $kwok_module requirement in $moddir/kwok/go.mod"

cache_root="${PHALANX_JOB_CONTROLLERS_CACHE:-$HOME/.cache/phalanx/job-controllers}"
outdir="$cache_root/training-operator-$to_version-kwok-$kwok_version"

if (( print_dir )); then
  echo "$outdir"
  exit 0
fi

# name|module dir|main package|version|ldflags beyond -s -w|files to copy from the module: src=>dest, ...
targets=(
  "training-operator|training-operator|$to_module/cmd/training-operator.v1|$to_version||manifests/base/crds/kubeflow.org_pytorchjobs.yaml=>crds/kubeflow.org_pytorchjobs.yaml"
  "kwok|kwok|$kwok_module/cmd/kwok|$kwok_version|-X $kwok_module/pkg/consts.Version=${kwok_version#v}|kustomize/stage/node/fast/node-initialize.yaml=>kwok-stages/node-initialize.yaml,kustomize/stage/pod/fast/pod-ready.yaml=>kwok-stages/pod-ready.yaml,kustomize/stage/pod/fast/pod-complete.yaml=>kwok-stages/pod-complete.yaml,kustomize/stage/pod/fast/pod-delete.yaml=>kwok-stages/pod-delete.yaml"
)

needs_build() {  # needs_build <name> <version> <files>: the binary or a file copied with it is missing or stale
  local name="$1" version="$2" files="$3" pair
  (( force )) && return 0
  [[ -x "$outdir/$name" ]] || return 0
  [[ "$(cat "$outdir/.$name.version" 2>/dev/null || true)" == "$version" ]] || return 0
  IFS=',' read -ra pairs <<<"$files"
  for pair in "${pairs[@]}"; do [[ -f "$outdir/${pair#*=>}" ]] || return 0; done
  return 1
}

todo=()
for t in "${targets[@]}"; do
  IFS='|' read -r name dir pkg version ldextra files <<<"$t"
  if needs_build "$name" "$version" "$files"; then
    todo+=("$t")
  else
    log "$name $version already built in $outdir"
  fi
done

if (( ${#todo[@]} == 0 )); then
  echo "$outdir"
  exit 0
fi

GO="${GO:-$(command -v go || true)}"
[[ -n "$GO" ]] || GO=/usr/local/go/bin/go
[[ -x "$GO" ]] || die "go toolchain not found (set GO=/path/to/go); tried '$GO'"
log "using $GO ($("$GO" env GOVERSION))"

mkdir -p "$outdir/crds" "$outdir/kwok-stages" || die "cannot create cache directory $outdir"
export CGO_ENABLED=0
export GOMAXPROCS="${GOMAXPROCS:-2}"
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=readonly"
nice_level="${PHALANX_BUILD_NICE:-19}"

start_all=$SECONDS
for t in "${todo[@]}"; do
  IFS='|' read -r name dir pkg version ldextra files <<<"$t"
  module="${pkg%/cmd/*}"
  tmp="$outdir/.$name.tmp.$$"
  start=$SECONDS
  if (( ! force )) && [[ -x "$outdir/$name" ]] && [[ "$(cat "$outdir/.$name.version" 2>/dev/null || true)" == "$version" ]]; then
    log "$name $version already built; copying its module files"  # only a copied file was missing
    cp -f "$outdir/$name" "$tmp"
  else
    log "building $name $version from $pkg (nice $nice_level, GOMAXPROCS=$GOMAXPROCS) ..."
    if ! (cd "$moddir/$dir" && nice -n "$nice_level" "$GO" build -trimpath -ldflags "-s -w $ldextra" -o "$tmp" "$pkg"); then
      rm -f "$tmp"
      die "building $name failed: (cd $moddir/$dir && CGO_ENABLED=0 $GO build -trimpath -ldflags '-s -w $ldextra' -o $tmp $pkg)"
    fi
  fi
  # Both parse flags before doing anything: --help exits 0 without a cluster.
  "$tmp" --help >/dev/null 2>&1 || { rm -f "$tmp"; die "built $name but '$tmp --help' fails"; }
  # The module source the binary was built from (in the module cache; `go list -m` downloads it if not).
  src="$(cd "$moddir/$dir" && "$GO" list -m -f '{{.Dir}}' "$module")"
  [[ -d "$src" ]] || die "no module source for $module in the module cache (got '$src')"
  IFS=',' read -ra pairs <<<"$files"
  for pair in "${pairs[@]}"; do
    from="$src/${pair%%=>*}" to="$outdir/${pair#*=>}"
    [[ -f "$from" ]] || die "$from is missing from $module $version"
    install -m 0644 "$from" "$to"
  done
  mv -f "$tmp" "$outdir/$name"
  echo "$version" >"$outdir/.$name.version"
  log "$name ready in $((SECONDS - start))s: $(du -h "$outdir/$name" | cut -f1)"
done
log "done in $((SECONDS - start_all))s"
echo "$outdir"
