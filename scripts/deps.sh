#!/usr/bin/env bash
# Installs the Debian packages that building, running and testing coraine
# need, when some are missing. As root it runs apt-get; otherwise it prints
# the exact sudo line and stops. Called by `make run` and `make test`.
set -eu
pkgs=(gcc make pkg-config libmicrohttpd-dev libcurl4-openssl-dev libpcre2-dev libgeos-dev
      libmosquitto-dev libicu-dev mosquitto libpq-dev postgresql libcmocka-dev libjansson-dev libcjson-dev libmongoc-dev python3 python3-pytest python3-requests curl wrk)
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
[ ${#missing[@]} -eq 0 ] && exit 0
echo "deps: installing ${missing[*]}"
if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}"
else
    echo "deps: missing packages; run:"
    echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}"
    exit 1
fi
