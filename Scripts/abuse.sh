#!/usr/bin/env bash
# Plays every attack of docs/SECURITY.md against a fresh release chat-server on this machine and
# prints one table: the server's peak memory against its budget, a control client's echo latency
# while the attack goes on, and who was cut off. Each attack gets its own server on a free
# loopback port, stopped by its PID afterwards.
set -euo pipefail

usage() {
    cat <<'USAGE'
Usage: Scripts/abuse.sh [options]

Builds chat-server and chat-abuse (release), then for each attack starts chat-server with its
default limits (--host :: --port 0), runs chat-abuse against it (the attackers from 127.0.0.1,
the control client from ::1, so that it has per-address limits of its own), stops the server by its PID,
and prints one Markdown table. A benchmark, not a test: it reports, and fails only if a run
could not be made.

Attacks (chat-abuse --help says what each does): amplification, pings, history, burst,
ping-flood, slowloris, reconnect, guessing.

Options:
  --connections N   hostile connections per attack (default 1000, all from 127.0.0.1)
  --duration S      seconds the control client chats during each attack (default 10)
  --only NAME       run only the attack NAME
  --max-memory SIZE the servers' --max-memory (default: the server's default)
  --no-build        use the binaries already built
  --shared-cores    let the attackers and the server share every core (by default, on a
                    machine with 2 or more, the server runs on core 0 and chat-abuse on the rest)
  -h, --help        show this help

Every server but the reconnect one allows --connections + 10 connections from one address, opened
as fast as they come (--address-connection-rate 0), so the attackers are not simply refused at
the door; the reconnect attack runs against the defaults but a limit of 50 connections, and the
guessing one against a server with a password.

Cores: in a real attack the attackers' connect loops run on their own machines. Here they share
the server's, and a busy attacker takes CPU from the server and its control client alike, so by
default the server gets core 0 and chat-abuse (attackers and control) the others, with taskset.

Environment:
  SCRATCH_PATH      build directory (default .build-release)
USAGE
}

die_usage() { echo "abuse.sh: $*" >&2; usage >&2; exit 2; }

connections=1000
duration=10
only=""
max_memory=""
build=1
pin=1
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --connections) [[ $# -ge 2 ]] || die_usage "--connections needs a value"; connections="$2"; shift ;;
        --duration) [[ $# -ge 2 ]] || die_usage "--duration needs a value"; duration="$2"; shift ;;
        --only) [[ $# -ge 2 ]] || die_usage "--only needs a value"; only="$2"; shift ;;
        --max-memory) [[ $# -ge 2 ]] || die_usage "--max-memory needs a value"; max_memory="$2"; shift ;;
        --no-build) build=0 ;;
        --shared-cores) pin=0 ;;
        *) die_usage "unknown option '$1'" ;;
    esac
    shift
done

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scratch="${SCRATCH_PATH:-.build-release}"
if [[ $build -eq 1 ]]; then
    echo "building chat-server and chat-abuse (release, $scratch)..." >&2
    for product in chat-server chat-abuse; do
        swift build -c release --scratch-path "$scratch" --product "$product" >&2
    done
fi
bin="$(swift build -c release --scratch-path "$scratch" --show-bin-path)"
for binary in chat-server chat-abuse; do
    [[ -x "$bin/$binary" ]] || { echo "abuse.sh: $bin/$binary is missing; run without --no-build" >&2; exit 1; }
done
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
server_cores=()
abuse_cores=()
cores="$(nproc)"
if [[ $pin -eq 1 && $cores -ge 2 ]] && command -v taskset >/dev/null; then
    server_cores=(taskset -c 0)
    abuse_cores=(taskset -c "1-$((cores - 1))")
    cpu_note="server on core 0, chat-abuse on cores 1-$((cores - 1))"
else
    cpu_note="server and chat-abuse sharing all $cores cores"
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/chat-abuse.XXXXXX")"
server_pid=""
drain_pid=""
stop_server() {
    if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
        kill -TERM "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    server_pid=""
    if [[ -n "$drain_pid" ]]; then
        wait "$drain_pid" 2>/dev/null || true
        drain_pid=""
    fi
    exec 3<&- 2>/dev/null || true
}
cleanup() {
    stop_server
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Starts a server with the default limits and any extra flags given; sets server_pid and port.
start_server() {
    rm -f "$work/server.fifo" "$work/server.err"
    mkfifo "$work/server.fifo"
    local memory=()
    [[ -n "$max_memory" ]] && memory=(--max-memory "$max_memory")
    "${server_cores[@]}" "$bin/chat-server" --no-persistence --host :: --port 0 --log-level info "${memory[@]}" "$@" \
        >"$work/server.fifo" 2>"$work/server.err" &
    server_pid=$!
    exec 3<"$work/server.fifo"
    local line=""
    if ! IFS= read -r -t 30 -u 3 line || [[ $line != "listening on "* ]]; then
        echo "abuse.sh: chat-server did not start (first line: '$line'):" >&2
        cat "$work/server.err" >&2 || true
        exit 1
    fi
    port="${line##*:}"
    cat <&3 >"$work/server.out" &
    drain_pid=$!
}

budget_line=""
rows=()
failures=0
for attack in amplification pings history burst ping-flood slowloris reconnect guessing; do
    if [[ -n "$only" && $attack != "$only" ]]; then continue; fi
    echo "attack: $attack" >&2
    flags=(--max-clients-per-address "$((connections + 10))" --address-connection-rate 0)
    abuse_flags=()
    attackers="$connections"
    case "$attack" in
        reconnect)
            flags=(--max-clients-per-address 50) ;;
        guessing)
            printf 's3cret\n' >"$work/password"
            flags+=(--password-file "$work/password")
            abuse_flags=(--password-file "$work/password")
            attackers=$((connections < 100 ? connections : 100)) ;;
    esac
    start_server "${flags[@]}"
    status=0
    row="$("${abuse_cores[@]}" "$bin/chat-abuse" --port "$port" --server-pid "$server_pid" --attack "$attack" \
        --connections "$attackers" --duration "$duration" "${abuse_flags[@]}")" || status=$?
    if [[ -z "$budget_line" ]]; then
        budget_line="$(sed -n 's/.*memory\.budget=\(.*per client)\).*/\1/p' "$work/server.err" | head -1)"
    fi
    stop_server
    log_bytes="$(wc -c <"$work/server.err")"
    if [[ $status -ne 0 || -z "$row" ]]; then
        failures=$((failures + 1))
        rows+=("| $attack | chat-abuse exited with status $status | | | | | | | |")
    else
        rows+=("${row} $((log_bytes / 1024)) KiB |")
    fi
done

echo
echo "Abuse table, $(date -u +%Y-%m-%d), release build, $(nproc) cores, ${duration} s per attack, ${cpu_note}"
[[ -n "$budget_line" ]] && echo "Server budget: $budget_line"
echo
echo "| attack | connections | server peak RSS | control echoes | control p50 | control p99 | control cut off | attackers cut off | server log |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
[[ $failures -eq 0 ]] || { echo "abuse.sh: $failures run(s) failed" >&2; exit 1; }
