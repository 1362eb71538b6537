#!/usr/bin/env bash
# Installs the official OpenAI and Anthropic npm clients that server's TestOfficialClients runs
# (server/testdata/llmclients) at the exact versions of its package-lock.json, once per lockfile,
# into ~/.cache/diana/llmclients-<lockfile hash>, and prints that directory. Install scripts are
# not run (none is needed).
set -euo pipefail
src="$(cd "$(dirname "$0")/../server/testdata/llmclients" && pwd)"
hash=$(sha256sum "$src/package-lock.json" | cut -c1-16)
dir="${XDG_CACHE_HOME:-$HOME/.cache}/diana/llmclients-$hash"
if [ ! -f "$dir/.installed" ]; then
  command -v npm >/dev/null || { echo "error: npm is needed (Debian package npm)" >&2; exit 1; }
  echo "llmclients: npm ci into $dir" >&2
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
  cp "$src/package.json" "$src/package-lock.json" "$dir.tmp/"
  (cd "$dir.tmp" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
  rm -rf "$dir" && mv "$dir.tmp" "$dir" && touch "$dir/.installed"
fi
echo "$dir"
