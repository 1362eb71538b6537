#!/usr/bin/env bash
# Makes sure redis-server is installed: the tests start their own servers on loopback ports.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then exit 0; fi
echo "redis-server not found: installing the Debian package redis-server" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null; }; then
  echo "error: could not install redis-server (apt-get failed); install it and run make test again" >&2
  exit 1
fi
# The package starts a system service on 6379; the tests do not use it.
$sudo service redis-server stop >/dev/null 2>&1 || true
command -v redis-server >/dev/null || { echo "error: redis-server still not on PATH" >&2; exit 1; }
