#!/usr/bin/env bash
# Makes sure the programs the tests need are installed, from Debian packages: redis-server,
# redis-sentinel and redis-cli (package redis-tools) — the tests start their own servers,
# Sentinels and Redis Clusters on loopback ports —, deck (it validates examples/kong.yml), and
# nginx (nginx-light, which has auth_request) and caddy, which run examples/nginx.conf and
# examples/Caddyfile in front of dianad's /v1/auth, and chromium and npm, which run Kong Manager's
# plugin form (kongplugin's TestKongManagerForm; build/kongmanager.sh installs its npm packages);
# npm (and its node) runs the official LLM clients too (server's TestOfficialClients;
# build/llmclients.sh).
set -euo pipefail
# program:package
needs=(redis-server:redis-server redis-sentinel:redis-sentinel redis-cli:redis-tools deck:deck nginx:nginx-light caddy:caddy chromium:chromium npm:npm)
missing=()
# nginx is in /usr/sbin, which a user's PATH may lack (the tests look there too).
found() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }
for n in "${needs[@]}"; do
  found "${n%%:*}" || missing+=("${n#*:}")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "not found: ${missing[*]}: installing the Debian packages" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null; }; then
  echo "error: could not install ${missing[*]} (apt-get failed); install them and run make test again" >&2
  exit 1
fi
# The packages start system services (6379, 26379, 80, Caddy's admin API on 2019); the tests
# do not use them.
for svc in redis-server redis-sentinel nginx caddy; do
  $sudo service "$svc" stop >/dev/null 2>&1 || true
done
for n in "${needs[@]}"; do
  found "${n%%:*}" || { echo "error: ${n%%:*} still not on PATH" >&2; exit 1; }
done
