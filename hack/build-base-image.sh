#!/usr/bin/env bash
# Builds a minimal Debian 12 (bookworm) base image with Python 3.11 from Debian's packages and imports it
# into podman as localhost/phalanx-base:bookworm (override with PHALANX_BASE_IMAGE). Used where public
# registries (docker.io/python:3.11-slim) cannot be pulled: the image tests and the compose stack build
# deploy/docker/Dockerfile with --build-arg PYTHON_IMAGE=localhost/phalanx-base:bookworm.
#
# Contents: debootstrap --variant=minbase + python3 (3.11), python3-venv, ca-certificates; no docs, man
# pages, locales or apt lists (derived images run `apt-get update` before installing anything). A dpkg
# config inside the image keeps docs out of packages installed later, too.
#
#   hack/build-base-image.sh            # build once; skipped when the image exists (prints its name last)
#   hack/build-base-image.sh --force    # rebuild
#
# Needs root (debootstrap chroots), debootstrap and podman (scripts/ensure-system-deps.sh --containers).
# Mirror: PHALANX_DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail
image="${PHALANX_BASE_IMAGE:-localhost/phalanx-base:bookworm}"
mirror="${PHALANX_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
security_mirror="${PHALANX_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
force=0
log() { echo "build-base-image: $*" >&2; }
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) log "unknown argument: $arg"; exit 2 ;;
  esac
done
command -v podman >/dev/null || { log "podman is required (apt-get install podman runc)"; exit 1; }
if [ "$force" = 0 ] && podman image exists "$image"; then
  echo "$image"
  exit 0
fi
command -v debootstrap >/dev/null || { log "debootstrap is required (apt-get install debootstrap)"; exit 1; }
[ "$(id -u)" = 0 ] || { log "debootstrap needs root"; exit 1; }

start=$SECONDS
work="$(mktemp -d "${TMPDIR:-/tmp}/phalanx-base.XXXXXX")"
# debootstrap mounts proc/sys inside the target; unmount before deleting so nothing of the host is removed.
cleanup() {
  for m in proc sys dev/pts dev; do umount -l "$work/rootfs/$m" 2>/dev/null || true; done
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT
rootfs="$work/rootfs"

log "debootstrap bookworm (minbase) from $mirror"
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
  bookworm "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 \
  || { tail -30 "$work/debootstrap.log" >&2; log "debootstrap failed"; exit 1; }

# Updates and security fixes, as in Debian's own images; then nothing of apt's downloads stays in the layer.
cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security_mirror bookworm-security main
EOF
# Packages installed by derived images leave documentation out as well (as Debian's slim images do).
cat >"$rootfs/etc/dpkg/dpkg.cfg.d/phalanx-nodoc" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EOF
cat >"$rootfs/etc/apt/apt.conf.d/phalanx-slim" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
EOF
chroot "$rootfs" /bin/sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get upgrade -y -qq' \
  >>"$work/debootstrap.log" 2>&1 || { tail -30 "$work/debootstrap.log" >&2; log "apt-get upgrade failed"; exit 1; }
for m in proc sys dev/pts dev; do umount -l "$rootfs/$m" 2>/dev/null || true; done

# Keep copyright files (licences), drop the rest of the docs; python3-venv's ensurepip wheels live in
# /usr/share/python-wheels and must stay, and so do the standard library's .pyc files (Debian compiles them
# at install time): containers run with a read-only root filesystem and could not cache them.
find "$rootfs/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete
find "$rootfs/usr/share/doc" -mindepth 1 -type d -empty -delete
rm -rf "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/* \
  "$rootfs"/usr/share/lintian "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* \
  "$rootfs"/var/cache/debconf/*-old "$rootfs"/var/lib/dpkg/*-old "$rootfs"/var/log/* "$rootfs"/tmp/* \
  "$rootfs"/debootstrap
# The build host's identity must not end up in the image.
: >"$rootfs/etc/resolv.conf"
echo localhost >"$rootfs/etc/hostname"

log "importing $image ($(du -sh --apparent-size "$rootfs" | cut -f1) root filesystem)"
tar --numeric-owner -C "$rootfs" -c . | podman import --quiet \
  --change 'ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV=LANG=C.UTF-8' \
  --change 'CMD=["/bin/bash"]' \
  --message "debootstrap bookworm minbase + python3 python3-venv ca-certificates" \
  - "$image" >/dev/null
log "built $image in $((SECONDS - start))s ($(podman image inspect --format '{{.Size}}' "$image") bytes)"
echo "$image"
