#!/usr/bin/env bash
# Plays every attack of docs/SECURITY.md against a fresh chat-server (release unless --debug) on this machine, in
# each mode asked for (durable, the default; memory; cluster), and prints one table: the server's
# peak memory against its budget, a control client's echo latency while the attack goes on, and
# who was cut off. Each attack gets its own server on a free loopback port (and in cluster mode its
# own redis-server), stopped by its PID afterwards. With --check it fails when an attack succeeded.
set -euo pipefail

usage() {
    cat <<'USAGE'
Usage: Scripts/abuse.sh [options]

Builds chat-server and chat-abuse (release, or debug with --debug), then for each mode and each attack starts
chat-server with its default limits (--host :: --port 0), runs chat-abuse against it (the
attackers from 127.0.0.1, the control client from ::1, so that it has per-address limits of its
own), stops the server by its PID, and prints one Markdown table. Without --check a benchmark: it
reports, and fails only if a run could not be made. With --check (what CI runs) also a test.

Modes (the server's storage, as a user chooses it):
  durable   the default: rooms in SQLite, in a fresh data directory per server under the
            script's temporary directory (never your own)
  memory    --no-persistence
  cluster   a one-node cluster (--cluster) on a fresh redis-server per attack (needs
            redis-server; Scripts/bootstrap.sh installs it)
TLS is not played here: chat-abuse speaks plain text only (the TLS attacks are in AttackTests).

Attacks (chat-abuse --help says what each does): amplification, pings, history, burst,
ping-flood, slowloris, reconnect, guessing.

Options:
  --connections N   hostile connections per attack (default 1000, all from 127.0.0.1)
  --duration S      seconds the control client chats during each attack (default 10)
  --only NAME       run only the attack NAME
  --modes LIST      comma-separated modes to run, in order (default: durable)
  --max-memory SIZE the servers' --max-memory (default: the server's default, 512M)
  --check           fail (exit 1) when an attack succeeded: the server died or did not stop within
                    20 s of SIGTERM, its peak RSS went over its --max-memory, or the control
                    client was cut off or got fewer than 90% of its echoes
  --no-build        use the binaries already built
  --debug           play against the debug build (what `swift build` makes, in .build unless
                    SCRATCH_PATH says otherwise) instead of release: what CI checks, with
                    --no-build, on the binaries its build step made. Slower, so never a benchmark
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
  SCRATCH_PATH      build directory (default .build-release, or .build with --debug)
USAGE
}

die_usage() { echo "abuse.sh: $*" >&2; usage >&2; exit 2; }

connections=1000
duration=10
only=""
max_memory=""
modes="durable"
check=0
build=1
configuration=release
pin=1
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --connections) [[ $# -ge 2 ]] || die_usage "--connections needs a value"; connections="$2"; shift ;;
        --duration) [[ $# -ge 2 ]] || die_usage "--duration needs a value"; duration="$2"; shift ;;
        --only) [[ $# -ge 2 ]] || die_usage "--only needs a value"; only="$2"; shift ;;
        --max-memory) [[ $# -ge 2 ]] || die_usage "--max-memory needs a value"; max_memory="$2"; shift ;;
        --modes) [[ $# -ge 2 ]] || die_usage "--modes needs a value"; modes="$2"; shift ;;
        --check) check=1 ;;
        --no-build) build=0 ;;
        --debug) configuration=debug ;;
        --shared-cores) pin=0 ;;
        *) die_usage "unknown option '$1'" ;;
    esac
    shift
done

IFS=, read -r -a mode_list <<<"$modes"
for mode in "${mode_list[@]}"; do
    case "$mode" in
        durable | memory) ;;
        cluster) command -v redis-server >/dev/null || { echo "abuse.sh: cluster mode needs redis-server (Scripts/bootstrap.sh)" >&2; exit 1; } ;;
        *) die_usage "unknown mode '$mode' (durable, memory, cluster)" ;;
    esac
done

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if [[ $configuration == release ]]; then scratch="${SCRATCH_PATH:-.build-release}"; else scratch="${SCRATCH_PATH:-.build}"; fi
if [[ $build -eq 1 ]]; then
    echo "building chat-server and chat-abuse ($configuration, $scratch)..." >&2
    for product in chat-server chat-abuse; do
        swift build -c "$configuration" --scratch-path "$scratch" --product "$product" >&2
    done
fi
bin="$(swift build -c "$configuration" --scratch-path "$scratch" --show-bin-path)"
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
redis_pid=""
# How the last server ended: "ok" (exit 0 after SIGTERM), "died" (gone before it was asked),
# "wedged" (still running 20 s after SIGTERM: killed), or "exit N".
server_end=""
stop_server() {
    server_end="ok"
    if [[ -n "$server_pid" ]]; then
        if kill -0 "$server_pid" 2>/dev/null; then
            kill -TERM "$server_pid" 2>/dev/null || true
            # A wedged server ignores SIGTERM; bounded, so that a run always ends.
            for _ in $(seq 200); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
            if kill -0 "$server_pid" 2>/dev/null; then
                kill -KILL "$server_pid" 2>/dev/null || true
                server_end="wedged"
            fi
        else
            server_end="died"
        fi
        local status=0
        wait "$server_pid" 2>/dev/null || status=$?
        [[ $server_end == ok && $status -ne 0 ]] && server_end="exit $status"
    fi
    server_pid=""
    if [[ -n "$drain_pid" ]]; then
        wait "$drain_pid" 2>/dev/null || true
        drain_pid=""
    fi
    # In braces: a bare `exec 3<&- 2>/dev/null` would send the script's own stderr to /dev/null for good.
    { exec 3<&-; } 2>/dev/null || true
    if [[ -n "$redis_pid" ]]; then
        kill -TERM "$redis_pid" 2>/dev/null || true
        wait "$redis_pid" 2>/dev/null || true
        redis_pid=""
    fi
}

# Starts a redis-server with no persistence on a free loopback port; sets redis_pid and
# redis_port. Redis cannot take port 0, so random ports are tried until one is free.
start_redis() {
    rm -rf "$work/redis"
    mkdir -p "$work/redis"
    for _ in $(seq 20); do
        redis_port=$((20000 + RANDOM % 40000))
        redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work/redis" \
            >"$work/redis.log" 2>&1 &
        redis_pid=$!
        for _ in $(seq 100); do
            grep -q "Ready to accept connections" "$work/redis.log" 2>/dev/null && return 0
            kill -0 "$redis_pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -TERM "$redis_pid" 2>/dev/null || true
        wait "$redis_pid" 2>/dev/null || true
        redis_pid=""
    done
    echo "abuse.sh: redis-server did not start:" >&2
    cat "$work/redis.log" >&2
    exit 1
}
cleanup() {
    stop_server
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Starts a server in $mode with the default limits and any extra flags given; sets server_pid
# and port.
start_server() {
    rm -f "$work/server.fifo" "$work/server.err"
    mkfifo "$work/server.fifo"
    local memory=()
    [[ -n "$max_memory" ]] && memory=(--max-memory "$max_memory")
    local storage=()
    case "$mode" in
        durable) rm -rf "$work/data"; storage=(--data-dir "$work/data") ;;
        memory) storage=(--no-persistence) ;;
        cluster) start_redis; storage=(--cluster "redis://127.0.0.1:$redis_port") ;;
    esac
    "${server_cores[@]}" "$bin/chat-server" "${storage[@]}" --host :: --port 0 --log-level info "${memory[@]}" "$@" \
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
    if [[ $mode == cluster ]]; then
        for _ in $(seq 300); do
            grep -q "cluster link up" "$work/server.err" && return 0
            sleep 0.1
        done
        echo "abuse.sh: the cluster node did not reach Redis within 30 s:" >&2
        cat "$work/server.err" >&2
        exit 1
    fi
}

# The budget --check holds the server's peak RSS to, in MiB: --max-memory, else the default.
budget_mib() {
    local size="${max_memory:-512M}"
    case "$size" in
        *G) echo $((${size%G} * 1024)) ;;
        *M) echo "${size%M}" ;;
        *K) echo $((${size%K} / 1024)) ;;
        *) echo $((size / 1048576)) ;;
    esac
}

# Why a run's row shows a successful attack, or nothing; for --check.
row_problems() {
    local row="$1" end="$2"
    local -a cells
    IFS='|' read -r -a cells <<<"$row"
    local rss="${cells[3]// /}" echoes="${cells[4]// /}" cut="${cells[7]// /}"
    local problems=()
    [[ $end == ok ]] || problems+=("server $end")
    local peak="${rss%%.*}"
    [[ $rss == *MiB && ${peak:-0} -lt $(budget_mib) ]] || problems+=("peak RSS $rss over $(budget_mib) MiB")
    local got="${echoes%%/*}" sent="${echoes##*/}"
    [[ $got =~ ^[0-9]+$ && $sent =~ ^[0-9]+$ && $sent -gt 0 && $((got * 10)) -ge $((sent * 9)) ]] ||
        problems+=("control echoes $echoes")
    [[ $cut == no ]] || problems+=("control cut off: $cut")
    local joined
    joined="$(printf '%s; ' "${problems[@]}")"
    echo "${joined%; }"
}

budget_line=""
rows=()
failures=0
failed_checks=()
tool_crashes=()
for mode in "${mode_list[@]}"; do
for attack in amplification pings history burst ping-flood slowloris reconnect guessing; do
    if [[ -n "$only" && $attack != "$only" ]]; then continue; fi
    echo "attack: $attack ($mode)" >&2
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
    for try in 1 2; do
        start_server "${flags[@]}"
        status=0
        row="$("${abuse_cores[@]}" "$bin/chat-abuse" --port "$port" --server-pid "$server_pid" --attack "$attack" \
            --connections "$attackers" --duration "$duration" "${abuse_flags[@]}")" || status=$?
        if [[ -z "$budget_line" ]]; then
            budget_line="$(sed -n 's/.*memory\.budget=\(.*per client)\).*/\1/p' "$work/server.err" | head -1)"
        fi
        stop_server
        # The attacking tool killed by a signal while the server was fine tells nothing about the
        # server: the attack is played once more, and the crash is reported at the end. (Seen
        # once: chat-abuse's libdispatch crashed registering a source during the reconnect
        # attack's thousands of connects a second.)
        if [[ $try -eq 1 && $status -gt 128 && $server_end == ok ]]; then
            echo "abuse.sh: chat-abuse died by signal $((status - 128)) during $attack ($mode), the server was fine; playing it again" >&2
            tool_crashes+=("$attack ($mode): chat-abuse died by signal $((status - 128)), played again")
            continue
        fi
        break
    done
    log_bytes="$(wc -c <"$work/server.err")"
    if [[ $status -ne 0 || -z "$row" ]]; then
        failures=$((failures + 1))
        rows+=("| $mode | $attack | chat-abuse exited with status $status (server: $server_end) | | | | | | | |")
    else
        rows+=("| $mode ${row} $((log_bytes / 1024)) KiB |")
        if [[ $check -eq 1 ]]; then
            problems="$(row_problems "$row" "$server_end")"
            if [[ -n "$problems" ]]; then
                failed_checks+=("$attack ($mode): $problems")
                echo "abuse.sh: $attack ($mode) succeeded: $problems; the server's log ends:" >&2
                tail -20 "$work/server.err" >&2
            fi
        fi
    fi
done
done

echo
echo "Abuse table, $(date -u +%Y-%m-%d), $configuration build, $(nproc) cores, ${duration} s per attack, ${cpu_note}"
[[ -n "$budget_line" ]] && echo "Server budget: $budget_line"
echo
echo "| mode | attack | connections | server peak RSS | control echoes | control p50 | control p99 | control cut off | attackers cut off | server log |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
for crash in "${tool_crashes[@]}"; do echo "abuse.sh: note: $crash" >&2; done
for failed in "${failed_checks[@]}"; do echo "abuse.sh: attack succeeded: $failed" >&2; done
[[ $failures -eq 0 && ${#failed_checks[@]} -eq 0 ]] || {
    echo "abuse.sh: $failures run(s) failed, ${#failed_checks[@]} attack(s) succeeded" >&2
    exit 1
}
