#!/usr/bin/env bash
# Installs the npm packages of Kong Manager's plugin form test (kongplugin/testdata/kongmanager:
# @kong-ui-public/entities-plugins and its peers, and vite) at the exact versions of its
# package-lock.json, once per lockfile, into ~/.cache/diana/kongmanager-<lockfile hash>, and prints
# that directory. Install scripts are not run (none is needed; nothing is downloaded but the
# registry's packages). package.json's overrides pin three of entities-plugins' dependencies to
# the releases its own version range was built against; their newest releases ask for packages
# the registry does not serve.
set -euo pipefail
src="$(cd "$(dirname "$0")/../kongplugin/testdata/kongmanager" && pwd)"
hash=$(sha256sum "$src/package-lock.json" | cut -c1-16)
dir="${XDG_CACHE_HOME:-$HOME/.cache}/diana/kongmanager-$hash"
if [ ! -f "$dir/.installed" ]; then
  command -v npm >/dev/null || { echo "error: npm is needed (Debian package npm)" >&2; exit 1; }
  echo "kongmanager: npm ci into $dir" >&2
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
  cp "$src/package.json" "$src/package-lock.json" "$dir.tmp/"
  (cd "$dir.tmp" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
  rm -rf "$dir" && mv "$dir.tmp" "$dir" && touch "$dir/.installed"
fi
echo "$dir"
