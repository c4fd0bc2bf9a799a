#!/usr/bin/env bash
# Measures chat-client's resident memory with a buffer per window: idle in 101 windows, after a
# flood into a window that is not shown, and after showing it. Prints one table row per case.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() {
    cat <<'EOF'
Usage: Scripts/client-memory.sh [options]

For each case BUFFER_LINES:LINES:RATE[:WINDOWS], on 127.0.0.1:
  1. starts chat-server --port 0 --no-persistence --no-rate-limits --max-rooms-per-client 200;
  2. starts chat-client as "reader" in an 80x24 tmux pane (a tmux server of its own), with a
     config file of its own (HOME is a fresh temporary directory): autojoin #general and #r1 to
     #r(ROOMS), buffer_lines = BUFFER_LINES; waits until it has joined them all and reads VmRSS
     from /proc/PID/status (idle);
  3. a second chat-client, in pipe mode, says "flood line number N" LINES times at RATE lines a
     second (batches every 0.1 s) while the reader looks at #general: all in the last room, or
     LINES/WINDOWS in each of the last WINDOWS rooms; then "flood done" in #general. Once the
     reader shows that line (one connection's lines arrive in order, so every flood line is in),
     reads VmRSS (after);
  4. the reader types /window for the last room; once its last line is on screen, VmRSS again
     (shown).
Then stops the clients (the tmux server on its own socket) and the server, by PID.

Options:
  --bin DIR       take chat-client and chat-server from DIR (default .build-release/release,
                  built first with `swift build -c release --scratch-path .build-release`)
  --rooms N       rooms besides #general (default 100)
  --case B:L:R[:W] a case, repeatable (default 2000:50000:5000, 100000:120000:1000 and
                  2000:200000:5000:100, every room's window full)
  -h, --help      show this help

MiB here is 1024 KiB, as /proc reports. Needs tmux.
EOF
}

bin=""
rooms=100
cases=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --bin) [[ $# -ge 2 ]] || { echo "--bin needs a value" >&2; exit 2; }; bin="$2"; shift 2 ;;
        --rooms) [[ $# -ge 2 ]] || { echo "--rooms needs a value" >&2; exit 2; }; rooms="$2"; shift 2 ;;
        --case) [[ $# -ge 2 ]] || { echo "--case needs a value" >&2; exit 2; }; cases+=("$2"); shift 2 ;;
        *) echo "client-memory.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[[ ${#cases[@]} -gt 0 ]] || cases=("2000:50000:5000" "100000:120000:1000" "2000:200000:5000:100")
command -v tmux > /dev/null || { echo "client-memory.sh: needs tmux" >&2; exit 1; }

if [[ -z "$bin" ]]; then
    (cd "$root" && swift build -c release --scratch-path .build-release --product chat-client > /dev/null \
        && swift build -c release --scratch-path .build-release --product chat-server > /dev/null)
    bin="$root/.build-release/release"
fi

work="$(mktemp -d /tmp/client-memory.XXXXXX)"
socket="client-memory-$$"
server_pid=""
flood_pid=""
cleanup() {
    tmux -L "$socket" kill-server 2> /dev/null || true
    [[ -n "$flood_pid" ]] && kill "$flood_pid" 2> /dev/null || true
    [[ -n "$server_pid" ]] && kill "$server_pid" 2> /dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

rss() { awk '/^VmRSS:/ { printf "%.1f MiB", $2 / 1024 }' "/proc/$1/status"; }

# Polls `tmux capture-pane` until it matches the extended regular expression $1, for $2 seconds.
wait_for_screen() {
    local deadline=$((SECONDS + $2))
    while ((SECONDS < deadline)); do
        tmux -L "$socket" capture-pane -p | grep -Eq -- "$1" && return 0
        sleep 0.2
    done
    echo "client-memory.sh: the screen never showed /$1/:" >&2
    tmux -L "$socket" capture-pane -p >&2
    exit 1
}

printf '| buffer_lines | lines | into hidden windows | rate | RSS idle, %s windows | RSS after | after showing #r%s |\n' "$((rooms + 1))" "$rooms"
printf '| --- | --- | --- | --- | --- | --- | --- |\n'
for case in "${cases[@]}"; do
    IFS=: read -r buffer lines rate windows <<< "$case"
    windows="${windows:-1}"
    first=$((rooms - windows + 1))
    "$bin/chat-server" --host 127.0.0.1 --port 0 --no-persistence --no-rate-limits --max-rooms-per-client 200 \
        > "$work/server.log" 2>&1 &
    server_pid=$!
    port=""
    for _ in $(seq 100); do
        port="$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/server.log" | head -1)"
        [[ -n "$port" ]] && break
        sleep 0.1
    done
    [[ -n "$port" ]] || { echo "client-memory.sh: the server did not start:" >&2; cat "$work/server.log" >&2; exit 1; }

    home="$work/home-$buffer"
    mkdir -p "$home/.config/chat-client"
    autojoin="\"#general\""
    for room in $(seq "$rooms"); do autojoin+=", \"#r$room\""; done
    printf 'nick = "reader"\nservers = ["127.0.0.1:%s"]\nautojoin = [%s]\nbuffer_lines = %s\n' "$port" "$autojoin" "$buffer" \
        > "$home/.config/chat-client/config.toml"
    # exec: the pane's process is the client itself, whose PID tmux reports.
    tmux -L "$socket" -f /dev/null new-session -d -x 80 -y 24 \
        "exec env HOME='$home' XDG_CONFIG_HOME='$home/.config' XDG_DATA_HOME='$home/.local/share' XDG_STATE_HOME='$home/.local/state' LANG=C.UTF-8 '$bin/chat-client'"
    client_pid="$(tmux -L "$socket" display-message -p '#{pane_pid}')"
    # Joined everywhere once the last room's window (number rooms + 1) shows the join; until
    # that window exists, /window answers that there is no such window, so ask again.
    deadline=$((SECONDS + 120))
    until tmux -L "$socket" capture-pane -p | grep -q -- "#r$rooms -!- reader joined"; do
        ((SECONDS < deadline)) || { echo "client-memory.sh: the reader never joined #r$rooms" >&2; exit 1; }
        tmux -L "$socket" send-keys "/window $((rooms + 1))" Enter
        sleep 2
    done
    tmux -L "$socket" send-keys M-1
    wait_for_screen "reader \| \[1:#general\]" 60
    sleep 2
    idle="$(rss "$client_pid")"

    # Batches of RATE/10 lines every 0.1 s; the pipe client says each line as it reads it, in
    # its current room (/switch moves it at once, where /join would wait for the server).
    flood_rooms=(--room general)
    for ((room = first; room <= rooms; room++)); do flood_rooms+=(--room "r$room"); done
    (
        batch=$((rate / 10))
        share=$((lines / windows))
        for ((room = first; room <= rooms; room++)); do
            echo "/switch #r$room"
            last=$(((room - first + 1) * share))
            for ((start = (room - first) * share + 1; start <= last; start += batch)); do
                end=$((start + batch - 1 < last ? start + batch - 1 : last))
                seq -f "flood line number %.0f" "$start" "$end"
                sleep 0.1
            done
        done
        printf '/switch #general\nflood done\n/quit\n'
    ) | "$bin/chat-client" --nick flood --server "127.0.0.1:$port" "${flood_rooms[@]}" > /dev/null 2>&1 &
    flood_pid=$!
    wait_for_screen "<flood> flood done" $((lines / rate * 4 + 120))
    wait "$flood_pid" || true
    flood_pid=""
    after="$(rss "$client_pid")"

    tmux -L "$socket" send-keys "/window $((rooms + 1))" Enter
    wait_for_screen "<flood> flood line number $((lines / windows * windows))" 60
    sleep 1
    shown="$(rss "$client_pid")"
    printf '| %s | %s | %s | %s/s | %s | %s | %s |\n' "$buffer" "$lines" "$windows" "$rate" "$idle" "$after" "$shown"

    tmux -L "$socket" kill-server
    kill "$server_pid"
    wait "$server_pid" 2> /dev/null || true
    server_pid=""
done
