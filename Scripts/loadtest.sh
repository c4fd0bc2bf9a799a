#!/usr/bin/env bash
# Runs a standard matrix of load tests against a real chat-server on this machine and prints one
# table: throughput, latency, losses, server and load-generator CPU, memory per connection.
# Each case gets a fresh server on a free loopback port, stopped by its PID afterwards.
# Exits non-zero if any case lost, duplicated or reordered a message, or failed to run.
set -euo pipefail

usage() {
    cat <<'USAGE'
Usage: Scripts/loadtest.sh [options]

Builds chat-server and chat-loadtest, then for each case of the matrix starts a server
(chat-server --port 0, on 127.0.0.1), runs chat-loadtest against it, stops the server by its
PID, and finally prints one Markdown table. Exit status: 0 if every case passed (nothing lost,
duplicated or reordered, every client joined), 1 otherwise, 2 for bad options.

The standard matrix (each case sends for --duration seconds or until --messages, whichever
comes first):
  50 clients, 1 room, 5 senders, maximum rate          one busy room, small
  500 clients, 1 room, 10 senders, maximum rate        one busy room, large
  100 clients, 1 room, 10 senders, 2000 msg/s          200,000 deliveries/s, fixed rate: latency
  10000 clients, 100 rooms, 10 senders, 1000 msg/s     many mostly idle connections: memory

Options:
  --quick           a few seconds in all: three small cases (50 clients at maximum rate, 100 at
                    2000 msg/s, 1000 in 10 rooms), 2 s each. Still fails on any loss. Uses the
                    debug build unless --release is given (CI has built it already).
  --release         build and run the release configuration (the default without --quick)
  --debug           build and run the debug configuration (numbers are not representative)
  --duration S      seconds of sending per case (default 10; 2 with --quick; at most 600)
  --messages N      most messages per case (default 5000000; 100000 with --quick)
  --size B          bytes of text per message (default 0: the shortest payload, about 21 bytes)
  --only NAME       run only the case whose name contains NAME (e.g. --only 10000)
  --hgrm-dir DIR    also write each case's latency distribution (.hgrm) into DIR
  --plot FILE.svg   draw every case's latency by percentile (HdrHistogram's percentile plot)
                    into one SVG picture, a line per case; open it in a browser
  --persistence M   off (default): servers keep rooms in memory only (--no-persistence);
                    on: servers store rooms in SQLite under a fresh data directory, with their
                    default --fsync normal; both: run each case twice in a row, off then on
                    (rows marked "memory" and "stored"), to compare the cost of durability
  --no-build        use the binaries already built (fails if they are missing)
  --tls             every case over TLS: certificates from Scripts/dev-cert.sh in a temporary
                    directory, chat-server --tls-cert/--tls-key, chat-loadtest --tls-ca
  --stunnel         every case over TLS terminated by stunnel (Debian's stunnel4) in front of a
                    plain chat-server, for comparison with --tls; the server columns then add
                    up chat-server and stunnel
  -h, --help        show this help

Environment:
  SCRATCH_PATH      build directory (default .build-release for release, .build for debug);
                    nothing in it is tracked by git

Notes:
  - The 10000-client case raises the open-file limit to the hard limit (ulimit -Hn must be at
    least about 10100) and lifts the server's per-address limit, since every client comes from
    127.0.0.1. Servers run with --no-rate-limits: a load test must not be throttled.
  - Both processes share this machine's cores; when the load generator's CPU is near 100% per
    thread, it, not the server, is the bottleneck (docs/BENCHMARKS.md discusses it).
USAGE
}

die_usage() { echo "loadtest.sh: $*" >&2; usage >&2; exit 2; }

quick=0
configuration=""
duration=""
messages=""
size=0
only=""
hgrm_dir=""
plot=""
build=1
persistence=off
tls=0
stunnel=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --quick) quick=1 ;;
        --release) configuration=release ;;
        --debug) configuration=debug ;;
        --duration) [[ $# -ge 2 ]] || die_usage "--duration needs a value"; duration="$2"; shift ;;
        --messages) [[ $# -ge 2 ]] || die_usage "--messages needs a value"; messages="$2"; shift ;;
        --size) [[ $# -ge 2 ]] || die_usage "--size needs a value"; size="$2"; shift ;;
        --only) [[ $# -ge 2 ]] || die_usage "--only needs a value"; only="$2"; shift ;;
        --hgrm-dir) [[ $# -ge 2 ]] || die_usage "--hgrm-dir needs a value"; hgrm_dir="$2"; shift ;;
        --plot) [[ $# -ge 2 ]] || die_usage "--plot needs a value"; plot="$2"; shift ;;
        --persistence) [[ $# -ge 2 ]] || die_usage "--persistence needs a value"; persistence="$2"; shift
            [[ $persistence == off || $persistence == on || $persistence == both ]] || die_usage "--persistence is off, on or both" ;;
        --no-build) build=0 ;;
        --tls) tls=1 ;;
        --stunnel) stunnel=1 ;;
        *) die_usage "unknown option '$1'" ;;
    esac
    shift
done

if [[ $quick -eq 1 ]]; then
    configuration="${configuration:-debug}"
    duration="${duration:-2}"
    messages="${messages:-100000}"
else
    configuration="${configuration:-release}"
    duration="${duration:-10}"
    messages="${messages:-5000000}"
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if [[ $configuration == release ]]; then
    scratch="${SCRATCH_PATH:-.build-release}"
else
    scratch="${SCRATCH_PATH:-.build}"
fi

# ---- the matrix: name, then chat-loadtest arguments ----------------------------------------
cases=()
if [[ $quick -eq 1 ]]; then
    cases+=("50 clients, max rate|--clients 50 --senders 5")
    cases+=("100 clients, 2000 msg/s|--clients 100 --senders 10 --rate 2000")
    cases+=("1000 clients, 10 rooms|--clients 1000 --rooms 10 --senders 10 --rate 1000")
else
    cases+=("50 clients, max rate|--clients 50 --senders 5")
    cases+=("500 clients, max rate|--clients 500 --senders 10")
    cases+=("100 clients, 2000 msg/s|--clients 100 --senders 10 --rate 2000")
    cases+=("10000 clients, 100 rooms|--clients 10000 --rooms 100 --senders 10 --rate 1000 --connect-rate 2500")
fi

# ---- build -----------------------------------------------------------------------------------
if [[ $build -eq 1 ]]; then
    echo "building chat-server and chat-loadtest ($configuration, $scratch)..." >&2
    for product in chat-server chat-loadtest; do
        swift build -c "$configuration" --scratch-path "$scratch" --product "$product" >&2
    done
fi
bin="$(swift build -c "$configuration" --scratch-path "$scratch" --show-bin-path)"
for binary in chat-server chat-loadtest; do
    [[ -x "$bin/$binary" ]] || { echo "loadtest.sh: $bin/$binary is missing; run without --no-build" >&2; exit 1; }
done

# Each client is a descriptor here and one in the server; the soft limit is often 1024.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
echo "open-file limit: $(ulimit -n)" >&2

# ---- one server at a time, always stopped by its PID -----------------------------------------
work="$(mktemp -d "${TMPDIR:-/tmp}/chat-loadtest.XXXXXX")"
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

server_tls=()
client_tls=()
[[ $tls -eq 1 && $stunnel -eq 1 ]] && die_usage "--tls and --stunnel are two ways of the same thing: pick one"
if [[ $tls -eq 1 || $stunnel -eq 1 ]]; then
    "$(dirname "${BASH_SOURCE[0]}")/dev-cert.sh" --out "$work/certs" >/dev/null
    client_tls=(--tls-ca "$work/certs/ca.pem")
fi
if [[ $tls -eq 1 ]]; then
    server_tls=(--tls-cert "$work/certs/server.pem" --tls-key "$work/certs/server-key.pem")
fi
if [[ $stunnel -eq 1 ]]; then
    command -v stunnel >/dev/null || { echo "loadtest.sh: --stunnel needs stunnel (apt-get install stunnel4)" >&2; exit 1; }
fi
stunnel_pid=""
stop_stunnel() {
    if [[ -n "$stunnel_pid" ]] && kill -0 "$stunnel_pid" 2>/dev/null; then
        kill -TERM "$stunnel_pid" 2>/dev/null || true
        wait "$stunnel_pid" 2>/dev/null || true
    fi
    stunnel_pid=""
}
trap 'stop_stunnel; cleanup' EXIT

# Puts stunnel in front of the server on `port`: TLS on a free loopback port, plain to the server.
# Sets stunnel_pid and replaces port with stunnel's.
start_stunnel() {
    local tls_port
    tls_port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    cat >"$work/stunnel.conf" <<CONF
foreground = yes
pid =
debug = 3
output = $work/stunnel.log
[chat]
accept = 127.0.0.1:$tls_port
connect = 127.0.0.1:$port
cert = $work/certs/server.pem
key = $work/certs/server-key.pem
CONF
    stunnel "$work/stunnel.conf" &
    stunnel_pid=$!
    local tries=0
    until python3 -c "import socket; socket.create_connection(('127.0.0.1', $tls_port), 1).close()" 2>/dev/null; do
        tries=$((tries + 1))
        [[ $tries -lt 100 ]] || { echo "loadtest.sh: stunnel did not start:" >&2; cat "$work/stunnel.log" >&2; exit 1; }
        sleep 0.1
    done
    port="$tls_port"
}

# Starts a server on a free port; sets server_pid and port. With "on", it stores rooms in a fresh
# data directory.
start_server() {
    local storage=(--no-persistence)
    if [[ ${1:-off} == on ]]; then
        rm -rf "$work/data"
        storage=(--data-dir "$work/data")
    fi
    rm -f "$work/server.fifo"
    mkfifo "$work/server.fifo"
    "$bin/chat-server" "${storage[@]}" --host 127.0.0.1 --port 0 --no-rate-limits ${server_tls[@]+"${server_tls[@]}"} \
        --max-clients 20000 --max-clients-per-address 20000 --max-memory 2G \
        --idle-ping-interval 300 --idle-timeout 600 --drain-timeout 2 --log-level warning \
        >"$work/server.fifo" 2>"$work/server.err" &
    server_pid=$!
    exec 3<"$work/server.fifo"
    local line=""
    # The first line says where it listens; wait for it, but not forever.
    if ! IFS= read -r -t 30 -u 3 line || [[ $line != "listening on "* ]]; then
        echo "loadtest.sh: chat-server did not start (first line: '$line'):" >&2
        cat "$work/server.err" >&2 || true
        exit 1
    fi
    port="${line##*:}"
    # Keep reading its standard output so the server never blocks on a full pipe.
    cat <&3 >"$work/server.out" &
    drain_pid=$!
}

# ---- run the matrix --------------------------------------------------------------------------
header=""
rows=()
plot_runs=()
failures=0
ran=0
case "$persistence" in
    both) modes=(off on) ;;
    *) modes=("$persistence") ;;
esac
for entry in "${cases[@]}"; do
  for mode in "${modes[@]}"; do
    name="${entry%%|*}"
    read -r -a arguments <<<"${entry#*|}"
    if [[ -n "$only" && $name != *"$only"* ]]; then continue; fi
    if [[ $persistence == both ]]; then
        if [[ $mode == on ]]; then name="$name, stored"; else name="$name, memory"; fi
    fi
    ran=$((ran + 1))
    echo "case: $name" >&2
    start_server "$mode"
    measured=(--server-pid "$server_pid")
    if [[ $stunnel -eq 1 ]]; then
        start_stunnel
        measured+=(--server-pid "$stunnel_pid")
    fi
    extra=()
    if [[ -n "$hgrm_dir" || -n "$plot" ]]; then
        # The plot draws the cases from their .hgrm files: kept in $work unless asked for.
        mkdir -p "${hgrm_dir:-$work/hgrm}"
        hgrm_file="${hgrm_dir:-$work/hgrm}/$(echo "$name" | tr -c 'a-zA-Z0-9\n' '-').hgrm"
        extra+=(--hgrm "$hgrm_file")
    fi
    status=0
    output="$("$bin/chat-loadtest" --port "$port" "${measured[@]}" \
        --duration "$duration" --messages "$messages" --size "$size" \
        "${arguments[@]}" ${extra[@]+"${extra[@]}"} ${client_tls[@]+"${client_tls[@]}"} --table-row "$name" --no-progress)" || status=$?
    stop_stunnel
    stop_server
    if [[ -n "$plot" && -s "$hgrm_file" ]]; then plot_runs+=(--plot-with "$name=$hgrm_file"); fi
    if [[ $status -ne 0 ]]; then failures=$((failures + 1)); fi
    if [[ $(printf '%s\n' "$output" | wc -l) -ge 3 ]]; then
        header="$(printf '%s\n' "$output" | sed -n 1,2p)"
        rows+=("$(printf '%s\n' "$output" | sed -n 3p)")
    else
        rows+=("| $name | chat-loadtest exited with status $status: $(printf '%s' "$output" | tr '\n' ' ') |")
        if [[ $status -eq 0 ]]; then failures=$((failures + 1)); fi
    fi
  done
done
[[ $ran -gt 0 ]] || die_usage "no case matches --only '$only'"

echo
echo "Load test, $(date -u +%Y-%m-%d), $configuration build, $(nproc) cores, ${duration} s per case, persistence $persistence"
echo
if [[ -n "$header" ]]; then echo "$header"; fi
printf '%s\n' "${rows[@]}"
if [[ -n "$plot" && ${#plot_runs[@]} -gt 0 ]]; then
    "$bin/chat-loadtest" --plot-only --plot "$plot" "${plot_runs[@]}"
    echo
    echo "latency by percentile: $plot"
fi
if [[ $failures -gt 0 ]]; then
    echo
    echo "FAILED: $failures case(s) lost, duplicated or reordered messages, or did not run" >&2
    exit 1
fi
