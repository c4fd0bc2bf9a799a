#!/usr/bin/env bash
# Builds (release) and starts chat-server; arguments go to chat-server (see --help).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
case "${1:-}" in
    -h | --help)
        echo "Usage: Scripts/server.sh [chat-server options]   (builds release, then runs chat-server)"
        echo "Defaults: 127.0.0.1:7000. Stop it with Ctrl-C: clients get a goodbye, it exits 0."
        echo
        swift build -c release --product chat-server >&2
        exec .build/release/chat-server --help ;;
esac
Scripts/bootstrap.sh
swift build -c release --product chat-server >&2
exec .build/release/chat-server "$@"
