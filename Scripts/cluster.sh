#!/usr/bin/env bash
# Runs a local chat cluster (docs/CLUSTER.md): one redis-server and N chat-server nodes on
# consecutive loopback ports, until Ctrl-C; then stops, by PID, everything it started.
set -euo pipefail

usage() {
    cat <<'USAGE'
Usage: Scripts/cluster.sh [options] [-- chat-server options]

Builds chat-server (release), starts redis-server on 127.0.0.1:REDIS_PORT with an append-only
file in a fresh temporary directory (so a Redis restart keeps the rooms), then NODES chat-server
nodes on 127.0.0.1:PORT, PORT+1, … each with --cluster redis://127.0.0.1:REDIS_PORT, and prints
how to join. Ctrl-C (or SIGTERM) stops the nodes (their clients get a goodbye), then Redis, and
removes the directory. Logs are in that directory while it runs: redis.log, node-PORT.log.

Options:
  --nodes N         how many nodes (default 3)
  --port PORT       the first node's port (default 7000)
  --redis-port P    Redis's port (default 6379)
  --no-build        use the chat-server already built
  -h, --help        show this help

Options after -- go to every node (for example -- --no-rate-limits).

Environment:
  SCRATCH_PATH      build directory (default .build-release)
  CHAT_SERVER       a chat-server binary to run instead of building one (the tests use the debug build)
USAGE
}

die_usage() { echo "cluster.sh: $*" >&2; usage >&2; exit 2; }

nodes=3
port=7000
redis_port=6379
build=1
node_args=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --nodes) [[ $# -ge 2 ]] || die_usage "--nodes needs a value"; nodes="$2"; shift ;;
        --port) [[ $# -ge 2 ]] || die_usage "--port needs a value"; port="$2"; shift ;;
        --redis-port) [[ $# -ge 2 ]] || die_usage "--redis-port needs a value"; redis_port="$2"; shift ;;
        --no-build) build=0 ;;
        --) shift; node_args=("$@"); break ;;
        *) die_usage "unknown option $1" ;;
    esac
    shift
done
[[ "$nodes" =~ ^[1-9][0-9]?$ ]] || die_usage "--nodes must be 1 to 99"
[[ "$port" =~ ^[0-9]+$ && "$port" -ge 1 && $((port + nodes - 1)) -le 65535 ]] || die_usage "--port must leave room for $nodes ports"
[[ "$redis_port" =~ ^[0-9]+$ && "$redis_port" -ge 1 && "$redis_port" -le 65535 ]] || die_usage "--redis-port must be a port number"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scratch="${SCRATCH_PATH:-.build-release}"
redis_server="$(command -v redis-server || true)"
[[ -n "$redis_server" ]] || { echo "cluster.sh: redis-server is missing (Scripts/bootstrap.sh installs it)" >&2; exit 1; }
if [[ -n "${CHAT_SERVER:-}" ]]; then
    server="$CHAT_SERVER"
else
    [[ "$build" == 0 ]] || swift build -c release --scratch-path "$scratch" --product chat-server >&2
    server="$scratch/release/chat-server"
fi
[[ -x "$server" ]] || { echo "cluster.sh: $server is not built (drop --no-build)" >&2; exit 1; }

directory="$(mktemp -d /tmp/chat-cluster-XXXXXX)"
pids=()

# Stops what this script started, by PID: the nodes first (they say goodbye to their clients and
# let their quits reach Redis), then Redis; then removes the directory.
stop_all() {
    trap - INT TERM EXIT
    echo >&2
    echo "stopping the cluster" >&2
    local pid
    for pid in "${pids[@]:1}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]:1}"; do wait "$pid" 2>/dev/null || true; done
    if [[ ${#pids[@]} -gt 0 ]]; then
        kill -TERM "${pids[0]}" 2>/dev/null || true
        wait "${pids[0]}" 2>/dev/null || true
    fi
    rm -rf "$directory"
}
trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$redis_server" --port "$redis_port" --bind 127.0.0.1 --dir "$directory" --appendonly yes --appendfsync always \
    --save "" --loglevel notice >"$directory/redis.log" 2>&1 &
pids+=("$!")
for _ in $(seq 1 100); do
    grep -qs "Ready to accept connections" "$directory/redis.log" && break
    kill -0 "${pids[0]}" 2>/dev/null || { cat "$directory/redis.log" >&2; echo "cluster.sh: redis-server did not start" >&2; exit 1; }
    sleep 0.1
done
grep -qs "Ready to accept connections" "$directory/redis.log" || { echo "cluster.sh: redis-server did not get ready" >&2; exit 1; }

for ((index = 0; index < nodes; index++)); do
    node_port=$((port + index))
    log="$directory/node-$node_port.log"
    "$server" --host 127.0.0.1 --port "$node_port" --cluster "redis://127.0.0.1:$redis_port" ${node_args[@]+"${node_args[@]}"} >"$log" 2>&1 &
    pids+=("$!")
    for _ in $(seq 1 100); do
        grep -qs "cluster link up" "$log" && break
        kill -0 "${pids[-1]}" 2>/dev/null || { cat "$log" >&2; echo "cluster.sh: the node on port $node_port did not start" >&2; exit 1; }
        sleep 0.1
    done
    grep -qs "cluster link up" "$log" || { cat "$log" >&2; echo "cluster.sh: the node on port $node_port did not reach Redis" >&2; exit 1; }
done

echo "Redis on 127.0.0.1:$redis_port (pid ${pids[0]}); logs in $directory"
for ((index = 0; index < nodes; index++)); do
    echo "node $((index + 1)) on 127.0.0.1:$((port + index)) (pid ${pids[index + 1]})"
done
echo
echo "Join any node, for example:"
echo "  Scripts/client.sh --host 127.0.0.1 --port $port --nick ann"
[[ "$nodes" -gt 1 ]] && echo "  Scripts/client.sh --host 127.0.0.1 --port $((port + 1)) --nick bob"
echo "Every node serves every room. Ctrl-C stops the cluster."
wait "${pids[0]}"
echo "cluster.sh: redis-server exited; stopping the nodes" >&2
