#!/usr/bin/env bash
# Installs the system packages the project runs against (a real redis-server) when they are missing.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ] && ! command -v sudo >/dev/null 2>&1; then
  echo "redis-server is missing: install it (Debian/Ubuntu: apt-get install redis-server)" >&2
  exit 1
fi
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
echo "installing redis-server from the distribution's packages" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
# The package starts a system-wide server on 6379; Phalanx's tests start their own on free ports.
