#!/usr/bin/env bash
# Installs the system packages the project runs against when they are missing:
#   scripts/ensure-system-deps.sh               a real redis-server (every `make` target that runs tests)
#   scripts/ensure-system-deps.sh --containers  also podman, runc, netavark, aardvark-dns, iptables and debootstrap, for
#                                               the container tests (make e2e-image, make e2e-compose)
# From the distribution's packages (apt-get, Debian/Ubuntu); elsewhere it says what is missing and fails.
set -euo pipefail
containers=0
for arg in "$@"; do
  case "$arg" in
    --containers) containers=1 ;;
    *) echo "ensure-system-deps: unknown argument: $arg" >&2; exit 2 ;;
  esac
done

# command -> package; runc rather than crun: crun fails on hosts with hybrid cgroups (hack/podman.sh).
missing=()
# redis-server also runs Sentinel (`redis-server <conf> --sentinel`: the Sentinel tests, `make chaos-sentinel`);
# Debian's redis-sentinel package only adds a system service and its config, so it is not needed.
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
if [ "$containers" = 1 ]; then
  command -v podman >/dev/null 2>&1 || missing+=(podman)
  command -v runc >/dev/null 2>&1 || missing+=(runc)
  command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
  command -v curl >/dev/null 2>&1 || missing+=(curl)  # hack/podman-api.sh asks the API socket
  # podman's network stack (a network with DNS between containers); the paths are Debian's and Ubuntu's.
  [ -x /usr/lib/podman/netavark ] || command -v netavark >/dev/null 2>&1 || missing+=(netavark)
  [ -x /usr/lib/podman/aardvark-dns ] || command -v aardvark-dns >/dev/null 2>&1 || missing+=(aardvark-dns)
  # netavark sets up a network's firewall rules with iptables; Debian only recommends it, and without it
  # every `RUN` of an image build fails with "netavark: No such file or directory".
  command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ] || missing+=(iptables)
fi
[ "${#missing[@]}" = 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-system-deps: missing ${missing[*]}: install them with your system's package manager" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ] && ! command -v sudo >/dev/null 2>&1; then
  echo "ensure-system-deps: missing ${missing[*]}: install them (apt-get install ${missing[*]})" >&2
  exit 1
fi
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
echo "ensure-system-deps: installing ${missing[*]} from the distribution's packages" >&2
$sudo apt-get update -qq
# Releases without netavark (e.g. Ubuntu 22.04) network podman with the CNI plugins instead.
packages=()
for pkg in "${missing[@]}"; do
  case "$pkg" in
    netavark|aardvark-dns)
      if apt-cache show "$pkg" >/dev/null 2>&1; then packages+=("$pkg"); else packages+=(containernetworking-plugins); fi ;;
    *) packages+=("$pkg") ;;
  esac
done
missing=("${packages[@]}")
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# redis-server's package starts a system-wide server on 6379; Phalanx's tests start their own on free ports.
