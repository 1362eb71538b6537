#!/usr/bin/env bash
# Provisions a working TinyGo for the wasm filter and prints the path of a wrapper that runs it.
#
#   TINYGO=$(build/tinygo.sh) && "$TINYGO" build -target=wasip1 ...
#
# No TinyGo release can be downloaded on our machines (only the Go module proxy, Debian's packages
# and npm are reachable), so TinyGo is built from its module source against Debian's LLVM 19:
#   1. Debian packages: LLVM/Clang/LLD 19, wasi-libc, compiler-rt for wasm32, binaryen, g++;
#   2. TinyGo's source from the module proxy (go mod download), copied to a writable cache dir;
#   3. a go1.25 toolchain from the module proxy (TinyGo 0.40.1 refuses go1.26);
#   4. go build -tags llvm19 (go-llvm's default is LLVM 20, which Debian here lacks);
#   5. what the module zip lacks (git submodules): an empty src/net, and TinyGo's library cache
#      seeded with Debian's prebuilt wasi-libc and compiler-rt builtins; the LLVM-20-only wasm
#      features are removed from targets/*.json;
#   6. a wrapper script setting TINYGOROOT, GOROOT, PATH, GOTOOLCHAIN=local and XDG_CACHE_HOME.
# Only the wasip1/wasi/wasm targets are provisioned. Everything lives under
# ${DIANA_CACHE:-$HOME/.cache/diana}; a second run checks the cached build and returns at once.
# Progress goes to stderr; stdout gets only the wrapper's path, as the last line.
#
# Environment: DIANA_CACHE (cache root), DIANA_TINYGO_GO (go toolchain for TinyGo, default below).
set -Eeuo pipefail

TINYGO_VERSION=0.40.1
GO_TOOLCHAIN=${DIANA_TINYGO_GO:-go1.25.14}
# Bump when the recipe changes, so cached builds made by an older recipe are redone.
RECIPE=1
APT_PACKAGES=(llvm-19-dev libclang-19-dev clang-19 lld-19 wasi-libc libclang-rt-19-dev-wasm32 binaryen g++)
WASI_LIBC_A=/usr/lib/wasm32-wasi/libc.a
WASI_INCLUDE=/usr/include/wasm32-wasi
BUILTINS_A=/usr/lib/llvm-19/lib/clang/19/lib/wasi/libclang_rt.builtins-wasm32.a

CACHE=${DIANA_CACHE:-${HOME:?HOME is not set}/.cache/diana}
ROOT=$CACHE/tinygo-$TINYGO_VERSION
XDG=$CACHE/xdg
WRAPPER=$CACHE/bin/tinygo
STAMP=$ROOT/.diana-provisioned
LIBCACHE=$XDG/tinygo
WASI_LIB_DIR=$LIBCACHE/wasi-libc-wasm32-unknown-wasi-generic
RT_LIB_DIR=$LIBCACHE/compiler-rt-wasm32-unknown-wasi-generic

# Keep stdout for the final path only: everything else, ours and the tools', goes to stderr.
exec 3>&1 1>&2

log() { echo "tinygo.sh: $*" >&2; }
die() {
	echo "tinygo.sh: error: $*" >&2
	exit 1
}
trap 'rc=$?; echo "tinygo.sh: error: command failed (exit $rc, line $LINENO): $BASH_COMMAND" >&2; exit $rc' ERR

stamp_text() { printf 'tinygo=%s go=%s recipe=%s goroot=%s\n' "$TINYGO_VERSION" "$GO_TOOLCHAIN" "$RECIPE" "$1"; }

# ready tells whether the cached build is complete and still runs (the fast path, well under 1 s).
ready() {
	[ -x "$WRAPPER" ] && [ -f "$STAMP" ] && [ -f "$WASI_LIB_DIR/lib.a" ] && [ -f "$RT_LIB_DIR/lib.a" ] || return 1
	local goroot
	goroot=$(sed -n 's/.* goroot=//p' "$STAMP")
	[ "$(cat "$STAMP")" = "$(stamp_text "$goroot")" ] && [ -x "$goroot/bin/go" ] || return 1
	command -v wasm-opt >/dev/null 2>&1 || return 1
	local v
	v=$("$WRAPPER" version 2>/dev/null) || return 1
	case $v in "tinygo version $TINYGO_VERSION "*) ;; *) return 1 ;; esac
}

finish() {
	echo "$WRAPPER" >&3
	exit 0
}

if ready; then finish; fi

mkdir -p "$CACHE" || die "cannot create the cache directory $CACHE (set DIANA_CACHE to a writable directory)"
# One provisioning at a time (make -j, parallel CI jobs); the winner's work is reused.
if command -v flock >/dev/null 2>&1; then
	exec 9>"$CACHE/tinygo.lock"
	flock 9
	if ready; then finish; fi
fi

start=$SECONDS
log "provisioning TinyGo $TINYGO_VERSION in $ROOT (a few minutes the first time)"

# --- 1. Debian packages -------------------------------------------------------------------------
missing=()
for p in "${APT_PACKAGES[@]}"; do
	if ! dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -qx installed; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -gt 0 ]; then
	command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install ${missing[*]} by hand"
	sudo=""
	if [ "$(id -u)" -ne 0 ]; then
		command -v sudo >/dev/null 2>&1 || die "not root and no sudo: install ${missing[*]} as root"
		sudo="sudo"
	fi
	log "installing Debian packages: ${missing[*]}"
	$sudo apt-get update -qq || die "apt-get update failed"
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
		die "apt-get install ${missing[*]} failed"
fi
for f in "$WASI_LIBC_A" "$BUILTINS_A" /usr/lib/llvm-19/bin/llvm-config; do
	[ -e "$f" ] || die "$f is missing although its Debian package is installed"
done
command -v wasm-opt >/dev/null 2>&1 || die "wasm-opt (Debian package binaryen) is not on PATH"
[ -d "$WASI_INCLUDE" ] || die "$WASI_INCLUDE is missing (Debian package wasi-libc)"

# --- 2. a go1.25 toolchain through the module proxy ----------------------------------------------
command -v go >/dev/null 2>&1 || die "go is not on PATH: a Go >= 1.21 is needed to fetch the $GO_TOOLCHAIN toolchain"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log "fetching the $GO_TOOLCHAIN toolchain through the module proxy"
goroot=$(cd "$work" && GOTOOLCHAIN=$GO_TOOLCHAIN GOWORK=off go env GOROOT) ||
	die "could not get the $GO_TOOLCHAIN toolchain (GOTOOLCHAIN=$GO_TOOLCHAIN go env GOROOT failed); set DIANA_TINYGO_GO to a go1.25.x the module proxy serves"
GO125=$goroot/bin/go
[ -x "$GO125" ] || die "no go binary in $goroot"
gov=$(GOTOOLCHAIN=local "$GO125" env GOVERSION)
case $gov in go1.19* | go1.2[0-5]*) ;; *) die "TinyGo $TINYGO_VERSION needs go1.19 to go1.25, $GO_TOOLCHAIN gave $gov" ;; esac

# Everything below builds with that toolchain alone.
export GOROOT=$goroot GOTOOLCHAIN=local GOWORK=off GOFLAGS=-buildvcs=false
export PATH=$goroot/bin:$PATH

# --- 3. TinyGo's source and build ----------------------------------------------------------------
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(stamp_text "$goroot")" ] && [ -x "$ROOT/bin/tinygo" ] &&
	TINYGOROOT=$ROOT "$ROOT/bin/tinygo" version >/dev/null 2>&1; then
	log "reusing the TinyGo build in $ROOT"
else
	rm -f "$STAMP"
	log "fetching github.com/tinygo-org/tinygo@v$TINYGO_VERSION through the module proxy"
	json=$(cd "$work" && go mod download -json "github.com/tinygo-org/tinygo@v$TINYGO_VERSION") ||
		die "go mod download github.com/tinygo-org/tinygo@v$TINYGO_VERSION failed: $json"
	src=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
	[ -n "$src" ] && [ -f "$src/go.mod" ] || die "go mod download gave no module directory: $json"

	stage=$ROOT.partial
	[ ! -e "$stage" ] || chmod -R u+w "$stage"
	rm -rf "$stage"
	cp -R "$src" "$stage"
	chmod -R u+w "$stage"

	log "building bin/tinygo with $gov and LLVM 19 (about a minute)"
	(cd "$stage" && CGO_ENABLED=1 go build -tags llvm19 -o bin/tinygo .) ||
		die "building TinyGo failed (see the compiler output above)"

	# Git submodules are not in module zips: an empty src/net lets the standard library resolve
	# (net/netip works; importing net itself still fails, and the filter must not).
	mkdir -p "$stage/src/net"
	# LLVM 19 does not know these LLVM 20 wasm features and warns on every build.
	for t in "$stage"/targets/*.json; do
		if grep -q -e '+bulk-memory-opt' -e '+call-indirect-overlong' "$t"; then
			sed -i -e 's/,+bulk-memory-opt//g; s/+bulk-memory-opt,//g' \
				-e 's/,+call-indirect-overlong//g; s/+call-indirect-overlong,//g' "$t"
		fi
	done
	! grep -q -e '+bulk-memory-opt' -e '+call-indirect-overlong' "$stage"/targets/*.json ||
		die "could not remove the LLVM 20 features from $stage/targets"

	rm -rf "$ROOT"
	mv "$stage" "$ROOT"
fi

# --- 4. the library cache: Debian's prebuilt wasi-libc and compiler-rt ----------------------------
# TinyGo would build them from submodule sources the module zip lacks; a lib.a in its cache
# (<XDG_CACHE_HOME>/tinygo/<lib>-<triple>-<cpu>/) is used as is.
seed_dir() { # seed_dir DIR: replace DIR by a fresh copy built in DIR.new
	rm -rf "$1"
	mv "$1.new" "$1"
}
if [ ! -f "$WASI_LIB_DIR/lib.a" ] || ! cmp -s "$WASI_LIBC_A" "$WASI_LIB_DIR/lib.a"; then
	log "seeding $WASI_LIB_DIR from Debian's wasi-libc"
	rm -rf "$WASI_LIB_DIR.new"
	mkdir -p "$WASI_LIB_DIR.new"
	cp -R "$WASI_INCLUDE" "$WASI_LIB_DIR.new/include"
	cp "$WASI_LIBC_A" "$WASI_LIB_DIR.new/lib.a"
	seed_dir "$WASI_LIB_DIR"
fi
if [ ! -f "$RT_LIB_DIR/lib.a" ] || ! cmp -s "$BUILTINS_A" "$RT_LIB_DIR/lib.a"; then
	log "seeding $RT_LIB_DIR from Debian's compiler-rt builtins"
	rm -rf "$RT_LIB_DIR.new"
	mkdir -p "$RT_LIB_DIR.new"
	cp "$BUILTINS_A" "$RT_LIB_DIR.new/lib.a"
	seed_dir "$RT_LIB_DIR"
fi

# --- 5. the wrapper ------------------------------------------------------------------------------
q() { printf "'%s'" "${1//\'/\'\\\'\'}"; } # single-quote for sh
mkdir -p "$(dirname "$WRAPPER")"
cat >"$WRAPPER.new" <<EOF
#!/bin/sh
# Written by Diana's build/tinygo.sh: TinyGo $TINYGO_VERSION built against Debian's LLVM 19, run
# with the $gov toolchain. XDG_CACHE_HOME holds TinyGo's seeded library cache (and, unless
# GOCACHE is set, the Go build cache TinyGo uses).
export TINYGOROOT=$(q "$ROOT")
export GOROOT=$(q "$goroot")
export PATH=$(q "$goroot/bin"):"\$PATH"
export GOTOOLCHAIN=local
export XDG_CACHE_HOME=$(q "$XDG")
exec $(q "$ROOT/bin/tinygo") "\$@"
EOF
chmod +x "$WRAPPER.new"
mv "$WRAPPER.new" "$WRAPPER"
stamp_text "$goroot" >"$STAMP"

ready || die "the provisioned TinyGo does not run: $("$WRAPPER" version 2>&1 || true)"
log "$("$WRAPPER" version) ready in $((SECONDS - start)) s"
finish
