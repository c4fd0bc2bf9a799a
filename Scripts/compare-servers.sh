#!/usr/bin/env bash
# Measures two or more chat-server builds against each other in one sitting: the same
# chat-loadtest, the servers alternating within each round, memory and durable mode, so the
# machine's noise spreads over all of them alike. Prints a Markdown table of deliveries per
# second and the server's CPU per case, and each durable run against the same build's memory run.
# Every server is started on 127.0.0.1 port 0 and stopped by its PID.
set -euo pipefail

usage() {
    cat <<'USAGE'
Usage: Scripts/compare-servers.sh [options] NAME=PATH/TO/chat-server [NAME=PATH ...]

Runs, for each round, for each client count, for each build in the order given, a memory-mode
server (--no-persistence) and a durable one (a fresh --data-dir, the default --fsync normal),
each with --no-rate-limits, and a maximum-rate load test against it (5 senders, --size 0).

Options:
  --loadtest PATH   the chat-loadtest binary (default: .build/release/chat-loadtest)
  --rounds N        rounds (default 3)
  --clients LIST    comma-separated client counts (default 50,500)
  --duration S      seconds of sending per run (default 5)
  -h, --help        this text

Build the builds to compare first, e.g. a worktree of the commit before a change:
  git worktree add /tmp/before COMMIT && (cd /tmp/before && swift build -c release --product chat-server)
  swift build -c release --product chat-server --product chat-loadtest
  Scripts/compare-servers.sh before=/tmp/before/.build/release/chat-server after=.build/release/chat-server
USAGE
}

loadtest=".build/release/chat-loadtest"
rounds=3
clients="50,500"
duration=5
builds=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --loadtest) loadtest="$2"; shift 2 ;;
        --rounds) rounds="$2"; shift 2 ;;
        --clients) clients="$2"; shift 2 ;;
        --duration) duration="$2"; shift 2 ;;
        *=*) builds+=("$1"); shift ;;
        *) echo "compare-servers.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
[[ ${#builds[@]} -ge 1 ]] || { usage >&2; exit 2; }
[[ -x "$loadtest" ]] || { echo "compare-servers.sh: no chat-loadtest at $loadtest" >&2; exit 2; }

work="$(mktemp -d)"
server_pid=""
cleanup() {
    [[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# Runs one case: prints "deliveries/s server-cpu% result".
run_case() {
    local binary="$1" mode="$2" count="$3"
    local storage=(--no-persistence)
    if [[ "$mode" == durable ]]; then
        rm -rf "$work/data"
        storage=(--data-dir "$work/data")
    fi
    "$binary" --host 127.0.0.1 --port 0 --no-rate-limits --max-clients-per-address 20000 "${storage[@]}" >"$work/server.log" 2>&1 &
    server_pid=$!
    local port=""
    for _ in $(seq 1 100); do
        port="$(grep -m1 '^listening on' "$work/server.log" 2>/dev/null | sed 's/.*://')" || true
        [[ -n "$port" ]] && break
        sleep 0.1
    done
    [[ -n "$port" ]] || { echo "? ? no-start"; kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""; return; }
    local output
    output="$("$loadtest" --port "$port" --clients "$count" --senders 5 --size 0 --messages 100000000 \
        --duration "$duration" --server-pid "$server_pid" 2>&1)" || true
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
    local rate cpu result
    rate="$(echo "$output" | awk '/^  delivered/ {print $2 $3}')"
    cpu="$(echo "$output" | awk '/^  server / && /%/ {for (i = 1; i <= NF; i++) if ($i ~ /%/) {gsub(/[;,]/, "", $i); print $i; exit}}')"
    result="$(echo "$output" | awk '/^Accounting/ {print $2}')"
    echo "${rate:-?} ${cpu:-?} ${result:-FAIL}"
}

echo "| clients | round | build | memory | durable |"
echo "| --- | --- | --- | --- | --- |"
IFS=',' read -r -a counts <<<"$clients"
for count in "${counts[@]}"; do
    for round in $(seq 1 "$rounds"); do
        for build in "${builds[@]}"; do
            name="${build%%=*}"
            binary="${build#*=}"
            read -r memory_rate memory_cpu memory_result <<<"$(run_case "$binary" memory "$count")"
            read -r durable_rate durable_cpu durable_result <<<"$(run_case "$binary" durable "$count")"
            echo "| $count | $round | $name | $memory_rate ($memory_cpu, $memory_result) | $durable_rate ($durable_cpu, $durable_result) |"
        done
    done
done
