#!/usr/bin/env bash
# Builds (release) and starts chat-client; arguments go to chat-client (see --help).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
Scripts/bootstrap.sh
swift build -c release --product chat-client >&2
exec .build/release/chat-client "$@"
