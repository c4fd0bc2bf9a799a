#!/usr/bin/env bash
# Measures cluster mode (docs/CLUSTER.md): the same load against one plain chat-server, and
# against 1, 2 and 3 nodes of a cluster on one redis-server, clients spread over the nodes.
# Everything runs on 127.0.0.1 and is stopped by its PID after each case.
set -euo pipefail

usage() {
    cat <<'USAGE'
Usage: Scripts/cluster-bench.sh [options]

For each case (a plain server, then clusters of 1, 2 and 3 nodes) starts a fresh redis-server
(no persistence) and the nodes on free loopback ports, runs chat-loadtest with one --server per
node (client i on node i mod n, so every room has members on every node and most deliveries
cross nodes), stops everything by PID, and prints one Markdown table: deliveries/s, latency
(with several nodes also split: deliveries whose sender was on the receiver's node, and those
that crossed nodes), the nodes' CPU (summed) and Redis's CPU per room event. Exits non-zero if any run lost, duplicated
or reordered a message.

Options:
  --load NAME      max (50 clients, 5 senders, maximum rate) or rate (100 clients, 10 senders,
                   2000 msg/s); default: both
  --duration S     seconds of sending per case (default 5)
  --rounds N       repeat the whole set N times, alternating (default 1)
  --no-build       use the release binaries already built
  -h, --help       show this help
USAGE
}

die_usage() { echo "cluster-bench.sh: $*" >&2; usage >&2; exit 2; }

loads=(max rate)
duration=5
rounds=1
build=1
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --load) [[ $# -ge 2 ]] || die_usage "--load needs a value"; loads=("$2"); shift ;;
        --duration) [[ $# -ge 2 ]] || die_usage "--duration needs a value"; duration="$2"; shift ;;
        --rounds) [[ $# -ge 2 ]] || die_usage "--rounds needs a value"; rounds="$2"; shift ;;
        --no-build) build=0 ;;
        *) die_usage "unknown option $1" ;;
    esac
    shift
done
[[ $duration =~ ^[0-9]+$ && $duration -ge 1 && $duration -le 600 ]] || die_usage "--duration must be 1...600"
[[ $rounds =~ ^[0-9]+$ && $rounds -ge 1 && $rounds -le 10 ]] || die_usage "--rounds must be 1...10"
command -v redis-server >/dev/null || { echo "cluster-bench.sh: redis-server is missing (Scripts/bootstrap.sh installs it)" >&2; exit 1; }

cd "$(dirname "$0")/.."
scratch=.build-release
if [[ $build -eq 1 ]]; then
    for product in chat-server chat-loadtest; do
        swift build -c release --scratch-path "$scratch" --product "$product" >&2
    done
fi
bin="$(swift build -c release --scratch-path "$scratch" --show-bin-path)"

work="$(mktemp -d "${TMPDIR:-/tmp}/chat-cluster-bench.XXXXXX")"
pids=()
stop_all() {
    for pid in ${pids[@]+"${pids[@]}"}; do kill "$pid" 2>/dev/null || true; done
    for pid in ${pids[@]+"${pids[@]}"}; do wait "$pid" 2>/dev/null || true; done
    pids=()
}
trap 'stop_all; rm -rf "$work"' EXIT

# A free loopback port: bind port 0 and read what the kernel chose.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# CPU seconds (user + system) a process has used, from /proc.
cpu_seconds() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }

# Starts a chat-server with the given options; sets node_port and node_pid.
start_node() {
    local fifo="$work/node.$RANDOM.fifo"
    mkfifo "$fifo"
    "$bin/chat-server" --host 127.0.0.1 --port 0 --no-persistence --no-rate-limits --max-memory 2G \
        --idle-ping-interval 300 --idle-timeout 600 --drain-timeout 2 --log-level warning "$@" >"$fifo" 2>>"$work/nodes.err" &
    node_pid=$!
    pids+=("$node_pid")
    exec 3<"$fifo"
    local line=""
    if ! IFS= read -r -t 30 -u 3 line || [[ $line != "listening on "* ]]; then
        echo "cluster-bench.sh: chat-server did not start: '$line'" >&2
        cat "$work/nodes.err" >&2
        exit 1
    fi
    node_port="${line##*:}"
    cat <&3 >/dev/null &
    pids+=("$!")
    exec 3<&-
    rm -f "$fifo"
}

rows=()
failures=0
for round in $(seq "$rounds"); do
  for load in "${loads[@]}"; do
    case "$load" in
        max) arguments=(--clients 50 --senders 5) ;;
        rate) arguments=(--clients 100 --senders 10 --rate 2000) ;;
        *) die_usage "--load is max or rate" ;;
    esac
    for nodes in plain 1 2 3; do
        servers=()
        server_pids=()
        redis_pid=""
        if [[ $nodes == plain ]]; then
            start_node
            servers+=(--server "127.0.0.1:$node_port")
            server_pids+=(--server-pid "$node_pid")
        else
            redis_port="$(free_port)"
            redis-server --bind 127.0.0.1 --port "$redis_port" --save "" --appendonly no \
                --dir "$work" --logfile "$work/redis.log" &
            redis_pid=$!
            pids+=("$redis_pid")
            for _ in $(seq 100); do
                redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
                sleep 0.1
            done
            for _ in $(seq "$nodes"); do
                start_node --cluster "redis://127.0.0.1:$redis_port"
                servers+=(--server "127.0.0.1:$node_port")
                server_pids+=(--server-pid "$node_pid")
            done
        fi
        name="$load, $([[ $nodes == plain ]] && echo "plain server" || echo "$nodes node(s)"), round $round"
        echo "case: $name" >&2
        redis_before=0
        [[ -n $redis_pid ]] && redis_before="$(cpu_seconds "$redis_pid")"
        status=0
        output="$("$bin/chat-loadtest" "${servers[@]}" "${server_pids[@]}" --duration "$duration" --messages 5000000 \
            "${arguments[@]}" --json --no-progress)" || status=$?
        redis_cpu="—"
        if [[ -n $redis_pid ]]; then
            redis_after="$(cpu_seconds "$redis_pid")"
            redis_cpu="$(python3 -c "import json,sys; r=json.loads(sys.argv[1]); n=max(1,r['sent']); print('%.1f µs' % ((float(sys.argv[3])-float(sys.argv[2]))/n*1e6))" "$output" "$redis_before" "$redis_after" 2>/dev/null || echo "?")"
        fi
        stop_all
        if [[ $status -ne 0 ]]; then failures=$((failures + 1)); fi
        rows+=("$(python3 -c "
import json, sys
r = json.loads(sys.argv[1])
d = r['deliveries']
split = r.get('latencyByServer')
nodes = '%.2f / %.2f ms' % (split['sameServer']['p50'] / 1e3, split['otherServer']['p50'] / 1e3) if split else '—'
print('| %s | %s | %.1f k | %.2f M | %.2f ms | %s | %.2f ms | %d/%d/%d | %.0f%% | %.0f%% | %s |' % (
    sys.argv[2], r['clients'], r['messagesPerSecond'] / 1e3, r['deliveriesPerSecond'] / 1e6,
    r['latency']['p50'] / 1e3, nodes, r['latency']['p99'] / 1e3, d['lost'], d['duplicated'], d['reordered'],
    r['server']['cpuPercent'], r['loadGenerator']['cpuPercent'], sys.argv[3]))
" "$output" "$name" "$redis_cpu" 2>/dev/null || echo "| $name | chat-loadtest exited with status $status: $(printf '%s' "$output" | tr '\n' ' ') |")")
    done
  done
done

echo
echo "Cluster benchmark, $(date -u +%Y-%m-%d), release build, $(nproc) cores, ${duration} s per case"
echo
echo "| case | clients | msg/s | deliveries/s | p50 | p50 same node / other node | p99 | lost/dup/reord | nodes' CPU | loadtest CPU | Redis CPU per message |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
if [[ $failures -gt 0 ]]; then
    echo
    echo "FAILED: $failures run(s) lost, duplicated or reordered messages, or did not run" >&2
    exit 1
fi
