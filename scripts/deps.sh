#!/usr/bin/env bash
# Installs the Debian packages that building, running and testing coraine
# need, when some are missing. As root it runs apt-get; otherwise it prints
# the exact sudo line and stops. Called by `make run` and `make test`.
set -eu
pkgs=(gcc make pkg-config libmicrohttpd-dev libgnutls28-dev libcurl4-openssl-dev libpcre2-dev libgeos-dev
      libmosquitto-dev libicu-dev mosquitto unzip libpq-dev postgresql libcmocka-dev libjansson-dev libcjson-dev libssl-dev libmongoc-dev python3 python3-pytest python3-requests python3-pymongo curl wrk
      libjemalloc2 libtcmalloc-minimal4)   # the allocators make tune measures (LD_PRELOAD)
[ "${CORAINE_DEPS_EXTRA:-}" ] && pkgs+=(${CORAINE_DEPS_EXTRA})
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# pytest/requests may come from another Python than Debian's; accept either.
if python3 -c 'import pytest, requests' 2>/dev/null; then
    tmp=(); for p in "${missing[@]}"; do case "$p" in python3-pytest|python3-requests) ;; *) tmp+=("$p");; esac; done
    missing=("${tmp[@]+"${tmp[@]}"}")
fi
# pymongo (test_mongoc_pushdown.py writes documents as an older version did) likewise
if python3 -c 'import pymongo' 2>/dev/null; then
    tmp=(); for p in "${missing[@]+"${missing[@]}"}"; do [ "$p" = python3-pymongo ] || tmp+=("$p"); done
    missing=("${tmp[@]+"${tmp[@]}"}")
fi
# Go >= 1.24 builds the FerretDB of the --database mongoc tests (test/ferretdb);
# Debian 12's golang-go is 1.19. The toolchain comes from the Go module proxy
# (the zip that GOTOOLCHAIN downloads), unpacked into $CORAINE_GO_DIR.
go_ok() { "$1" version 2>/dev/null | grep -Eq 'go1\.(2[4-9]|[3-9][0-9])'; }
need_go() {
    for g in "$(command -v go || true)" /usr/local/go/bin/go "${CORAINE_GO_DIR:-/usr/local/lib/coraine-go}/bin/go"; do
        [ -n "$g" ] && go_ok "$g" && return 1
    done
    return 0
}
fetch_go() {
    [ -z "${CORAINE_DEPS_NO_GO:-}" ] && need_go || return 0
    local v=go1.24.4 dir=${CORAINE_GO_DIR:-/usr/local/lib/coraine-go} zip tmp
    zip=$(mktemp --suffix=.zip)
    echo "deps: fetching the Go toolchain $v into $dir (for FerretDB, the mongoc tests)"
    if curl -fsSL -o "$zip" "https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-$v.linux-amd64.zip" &&
       tmp=$(mktemp -d) && unzip -q "$zip" -d "$tmp" && mkdir -p "$(dirname "$dir")" &&
       rm -rf "$dir" && mv "$tmp"/golang.org/toolchain@*/ "$dir" && chmod +x "$dir"/bin/* "$dir"/pkg/tool/*/*; then
        echo "deps: $("$dir/bin/go" version)"
    else
        echo "deps: could not fetch Go; the --database mongoc tests will be skipped" >&2
    fi
    rm -f "$zip"
}
[ ${#missing[@]} -eq 0 ] && { fetch_go; exit 0; }
echo "deps: installing ${missing[*]}"
if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}"
    fetch_go
else
    echo "deps: missing packages; run:"
    echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}"
    exit 1
fi
