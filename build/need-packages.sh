#!/usr/bin/env bash
# Makes sure the programs the tests need are installed, from the Debian packages of the same
# names: redis-server (the tests start their own servers on loopback ports) and deck (it
# validates examples/kong.yml).
set -euo pipefail
missing=()
for p in redis-server deck; do
  command -v "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "not found: ${missing[*]}: installing the Debian packages" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null; }; then
  echo "error: could not install ${missing[*]} (apt-get failed); install them and run make test again" >&2
  exit 1
fi
# The redis-server package starts a system service on 6379; the tests do not use it.
$sudo service redis-server stop >/dev/null 2>&1 || true
for p in "${missing[@]}"; do
  command -v "$p" >/dev/null || { echo "error: $p still not on PATH" >&2; exit 1; }
done
