#!/usr/bin/env bash
# Installs the system packages the project needs and a fresh Debian machine lacks:
# libssl-dev (TLS), libsqlite3-dev (durable rooms), libedit-dev (chat-client's input line),
# libsodium-dev (Argon2id password hashes), pkg-config (finds them), tmux (the
# terminal tests), openssl (Scripts/dev-cert.sh, the TLS interoperability tests), redis-server
# (the cluster mode's Redis, which its tests start on free loopback ports) and prometheus
# (promtool checks /metrics and the alert rules; a real Prometheus scrapes a test server on
# loopback). Does nothing when all are there. Called by the other scripts; safe to run by hand.
set -euo pipefail

case "${1:-}" in
    -h | --help)
        cat <<'USAGE'
Usage: Scripts/bootstrap.sh

Installs, with apt-get, whichever of these is missing: libssl-dev, libsqlite3-dev, libedit-dev,
libsodium-dev, pkg-config, tmux, openssl, redis-server, prometheus (for promtool; its service is
not started).
Needs root (or sudo). Prints nothing when everything is already installed.
USAGE
        exit 0 ;;
esac

missing=()
[[ -f /usr/include/openssl/ssl.h ]] || missing+=(libssl-dev)
[[ -f /usr/include/sqlite3.h ]] || missing+=(libsqlite3-dev)
[[ -f /usr/include/histedit.h ]] || missing+=(libedit-dev)
[[ -f /usr/include/sodium.h ]] || missing+=(libsodium-dev)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
command -v tmux >/dev/null 2>&1 || missing+=(tmux)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
[[ -x /usr/bin/redis-server ]] || missing+=(redis-server)
[[ -x /usr/bin/promtool ]] || missing+=(prometheus)
[[ ${#missing[@]} -eq 0 ]] && exit 0

sudo=""
if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || { echo "bootstrap.sh: need root to install ${missing[*]}" >&2; exit 1; }
    sudo=sudo
fi
echo "bootstrap.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >&2
others=()
for package in "${missing[@]}"; do [[ $package == prometheus ]] || others+=("$package"); done
[[ ${#others[@]} -eq 0 ]] || $sudo apt-get install -y -qq "${others[@]}" >&2
if [[ ${#others[@]} -ne ${#missing[@]} ]]; then
    # Without recommends: prometheus recommends its node exporter, which nothing here needs.
    $sudo apt-get install -y -qq --no-install-recommends prometheus >&2
    # The package enables its service, listening on every address (:9090): the tests run their
    # own on loopback, so a running systemd is told to stop it and leave it off.
    if [[ -d /run/systemd/system ]]; then $sudo systemctl disable --now prometheus.service >&2 || true; fi
fi
