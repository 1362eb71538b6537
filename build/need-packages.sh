#!/usr/bin/env bash
# Makes sure the programs the tests need are installed, from Debian packages: redis-server,
# redis-sentinel and redis-cli (package redis-tools) — the tests start their own servers,
# Sentinels and Redis Clusters on loopback ports — and deck (it validates examples/kong.yml).
set -euo pipefail
# program:package
needs=(redis-server:redis-server redis-sentinel:redis-sentinel redis-cli:redis-tools deck:deck)
missing=()
for n in "${needs[@]}"; do
  command -v "${n%%:*}" >/dev/null 2>&1 || missing+=("${n#*:}")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "not found: ${missing[*]}: installing the Debian packages" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null; }; then
  echo "error: could not install ${missing[*]} (apt-get failed); install them and run make test again" >&2
  exit 1
fi
# The packages start system services on 6379 and 26379; the tests do not use them.
$sudo service redis-server stop >/dev/null 2>&1 || true
$sudo service redis-sentinel stop >/dev/null 2>&1 || true
for n in "${needs[@]}"; do
  command -v "${n%%:*}" >/dev/null || { echo "error: ${n%%:*} still not on PATH" >&2; exit 1; }
done
