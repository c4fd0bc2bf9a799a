#!/usr/bin/env bash
# Measures what an idle connection costs chat-server in resident memory: N real clients that
# said hello, were welcomed and joined a room, then stay silent. Prints KB per idle connection per
# mode (memory and durable), the median of a few runs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() {
    cat <<'EOF'
Usage: Scripts/idle-memory.sh [options]

For each mode and run: starts chat-server on 127.0.0.1 (port 0), waits a second, reads its VmRSS
and RssAnon from /proc, connects N clients (one Python process, epoll) that each send hello,
wait for welcome, join one of R rooms (round robin) and wait for the room's member list; then
waits until no byte has arrived for a second plus --settle seconds, reads VmRSS and RssAnon
again, and prints (after - before) / N. Clients and server are then stopped (the server by its
PID, with SIGTERM).

Modes:
  memory    chat-server --no-persistence
  durable   chat-server with its default SQLite store, --data-dir in a fresh temporary directory

Options:
  --bin DIR        use DIR/chat-server instead of building release (.build-release/release)
  --clients N      idle connections per run (default 10000)
  --rooms R        rooms the clients are spread over (default 100)
  --runs K         runs per mode; the table shows the median (default 3)
  --modes LIST     comma-separated: memory, durable (default memory,durable)
  --settle S       seconds to wait after the last byte before reading memory (default 2)
  --hold S         after reading memory, keep the clients connected S more seconds (default 0)
                   and print the server's PID to standard error, to look inside the idle
                   server meanwhile (gdb, /proc/PID/smaps_rollup)
  -h, --help       show this help

The server runs with --no-rate-limits and --max-clients / --max-clients-per-address above N (every
client comes from 127.0.0.1), a 2G --max-memory (as Scripts/loadtest.sh's 10000-client case) and
pings pushed out past the measurement. The open-file limit is raised to the hard limit; it must
be at least N + 100 (check `ulimit -Hn`). KB here is 1000 bytes; /proc reports KiB.
EOF
}

bin=""
clients=10000
rooms=100
runs=3
modes="memory,durable"
settle=2
hold=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --bin) [[ $# -ge 2 ]] || { echo "--bin needs a value" >&2; exit 2; }; bin="$2"; shift 2 ;;
        --clients) [[ $# -ge 2 ]] || { echo "--clients needs a value" >&2; exit 2; }; clients="$2"; shift 2 ;;
        --rooms) [[ $# -ge 2 ]] || { echo "--rooms needs a value" >&2; exit 2; }; rooms="$2"; shift 2 ;;
        --runs) [[ $# -ge 2 ]] || { echo "--runs needs a value" >&2; exit 2; }; runs="$2"; shift 2 ;;
        --modes) [[ $# -ge 2 ]] || { echo "--modes needs a value" >&2; exit 2; }; modes="$2"; shift 2 ;;
        --settle) [[ $# -ge 2 ]] || { echo "--settle needs a value" >&2; exit 2; }; settle="$2"; shift 2 ;;
        --hold) [[ $# -ge 2 ]] || { echo "--hold needs a value" >&2; exit 2; }; hold="$2"; shift 2 ;;
        *) echo "idle-memory.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[[ $clients =~ ^[0-9]+$ && $clients -ge 1 && $clients -le 100000 ]] || { echo "--clients is 1 to 100000" >&2; exit 2; }
[[ $rooms =~ ^[0-9]+$ && $rooms -ge 1 ]] || { echo "--rooms is at least 1" >&2; exit 2; }
[[ $runs =~ ^[0-9]+$ && $runs -ge 1 && $runs -le 20 ]] || { echo "--runs is 1 to 20" >&2; exit 2; }
[[ $settle =~ ^[0-9]+$ && $settle -le 60 ]] || { echo "--settle is 0 to 60 seconds" >&2; exit 2; }
[[ $hold =~ ^[0-9]+$ && $hold -le 3600 ]] || { echo "--hold is 0 to 3600 seconds" >&2; exit 2; }
for mode in ${modes//,/ }; do
    [[ $mode == memory || $mode == durable ]] || { echo "unknown mode '$mode' (memory, durable)" >&2; exit 2; }
done

if [[ -z "$bin" ]]; then
    cd "$root"
    swift build -c release --product chat-server --scratch-path .build-release >&2
    bin="$root/.build-release/release"
fi
[[ -x "$bin/chat-server" ]] || { echo "no $bin/chat-server" >&2; exit 1; }

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [[ $(ulimit -n) -lt $((clients + 100)) ]]; then
    echo "open-file limit $(ulimit -n) is below $((clients + 100)); raise ulimit -Hn" >&2
    exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

python3 - "$bin/chat-server" "$clients" "$rooms" "$runs" "$modes" "$settle" "$hold" "$work" <<'EOF'
import errno, os, selectors, signal, socket, statistics, subprocess, sys, time

server_path, clients, rooms, runs, modes, settle, hold, work = sys.argv[1:]
clients, rooms, runs, settle, hold = int(clients), int(rooms), int(runs), int(settle), int(hold)
modes = modes.split(",")

def status_kib(pid):
    """VmRSS and RssAnon (KiB) from /proc/PID/status."""
    values = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "RssAnon"):
                values[key] = int(rest.split()[0])
    return values["VmRSS"], values["RssAnon"]

def varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)

def frame(kind, fields):
    return varint(len(fields) + 1) + bytes([kind]) + fields

def name(text):
    data = text.encode()
    return varint(len(data)) + data

def hello(nick):
    # Version 1: join is then answered by joined, members, topic and history, no v2 extras.
    return frame(0x01, b"\x01" + name(nick) + b"\x00")

def join(room):
    return frame(0x03, name(room))

WELCOME, MEMBERS, PING, ERROR, GOODBYE = 0x20, 0x2A, 0x40, 0x42, 0x43

class Client:
    __slots__ = ("sock", "index", "buffer", "state")
    def __init__(self, sock, index):
        self.sock, self.index, self.buffer, self.state = sock, index, bytearray(), "connecting"

def frames(buffer):
    """Pops whole frames (type, fields) off the front of buffer."""
    while True:
        length, shift, at = 0, 0, 0
        while at < len(buffer):
            byte = buffer[at]
            length |= (byte & 0x7F) << shift
            shift += 7
            at += 1
            if not byte & 0x80:
                break
        else:
            return
        if len(buffer) < at + length:
            return
        kind, fields = buffer[at], bytes(buffer[at + 1:at + length])
        del buffer[:at + length]
        yield kind, fields

def connect_idle(port, deadline):
    """Connects `clients` clients that handshake and join; returns them once all have joined and
    the server has been silent for a second."""
    selector = selectors.DefaultSelector()
    pending = list(range(clients))
    pending.reverse()
    everyone, joined, handshaking = [], 0, 0
    last_byte = time.monotonic()
    while True:
        now = time.monotonic()
        if now > deadline:
            raise RuntimeError(f"only {joined} of {clients} clients joined in time")
        # Bounded handshakes in flight, so the server's accept backlog never overflows.
        while pending and handshaking < 500:
            index = pending.pop()
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            code = sock.connect_ex(("127.0.0.1", port))
            if code not in (0, errno.EINPROGRESS):
                raise RuntimeError(f"connect: {os.strerror(code)}")
            client = Client(sock, index)
            everyone.append(client)
            handshaking += 1
            selector.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, client)
        if not pending and joined == clients and now - last_byte > 1:
            return selector, everyone
        for key, events in selector.select(timeout=0.2):
            client = key.data
            if client.state == "connecting" and events & selectors.EVENT_WRITE:
                failure = client.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if failure:
                    raise RuntimeError(f"connect: {os.strerror(failure)}")
                client.sock.send(hello(f"idle{client.index}"))
                client.state = "hello"
                selector.modify(client.sock, selectors.EVENT_READ, client)
            if not events & selectors.EVENT_READ:
                continue
            try:
                data = client.sock.recv(65536)
            except BlockingIOError:
                continue
            if not data:
                raise RuntimeError(f"client {client.index} closed by the server in state {client.state}")
            last_byte = time.monotonic()
            client.buffer += data
            for kind, fields in frames(client.buffer):
                if kind == WELCOME and client.state == "hello":
                    client.sock.send(join(f"room{client.index % rooms}"))
                    client.state = "joining"
                elif kind == MEMBERS and client.state == "joining":
                    client.state = "joined"
                    joined += 1
                    handshaking -= 1
                elif kind == PING:
                    client.sock.send(frame(0x41, fields))
                elif kind in (ERROR, GOODBYE):
                    raise RuntimeError(f"client {client.index}: frame 0x{kind:02x} {fields!r}")

def run(mode, number):
    arguments = [server_path, "--host", "127.0.0.1", "--port", "0",
                 "--max-clients", str(clients + 100), "--max-clients-per-address", str(clients + 100),
                 "--no-rate-limits", "--max-memory", "2G", "--handshake-timeout", "60",
                 "--idle-ping-interval", "3600", "--idle-timeout", "7200", "--log-level", "warning"]
    if mode == "memory":
        arguments.append("--no-persistence")
    else:
        arguments += ["--data-dir", f"{work}/data-{number}"]
    server = subprocess.Popen(arguments, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    everyone = []
    try:
        line = server.stdout.readline().decode()
        if not line.startswith("listening on"):
            raise RuntimeError(f"chat-server printed {line!r}")
        port = int(line.strip().rsplit(":", 1)[1])
        time.sleep(1)
        before = status_kib(server.pid)
        started = time.monotonic()
        selector, everyone = connect_idle(port, started + 120)
        connected = time.monotonic() - started
        time.sleep(settle)
        after = status_kib(server.pid)
        if hold:
            print(f"holding {clients} idle clients of {mode} server PID {server.pid} for {hold} s", file=sys.stderr, flush=True)
            time.sleep(hold)
        selector.close()
        return before, after, connected
    finally:
        for client in everyone:
            client.sock.close()
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()

def per_connection(before, after):
    # /proc counts KiB; the table shows KB (1000 bytes) per connection.
    return (after - before) * 1024 / clients / 1000

print(f"idle memory: {clients} clients in {rooms} rooms, {runs} runs per mode, {server_path}")
print("| mode | run | VmRSS before (MiB) | VmRSS after (MiB) | KB/conn (RSS) | KB/conn (RssAnon) | connect s |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
summary = []
for mode in modes:
    rss, anon = [], []
    for number in range(1, runs + 1):
        (rss0, anon0), (rss1, anon1), seconds = run(mode, number)
        rss.append(per_connection(rss0, rss1))
        anon.append(per_connection(anon0, anon1))
        print(f"| {mode} | {number} | {rss0 / 1024:.1f} | {rss1 / 1024:.1f} | {rss[-1]:.2f} | {anon[-1]:.2f} | {seconds:.1f} |",
              flush=True)
    summary.append((mode, statistics.median(rss), statistics.median(anon)))
print()
print("| mode | KB per idle connection, VmRSS (median) | RssAnon (median) |")
print("| --- | ---: | ---: |")
for mode, rss, anon in summary:
    print(f"| {mode} | {rss:.2f} | {anon:.2f} |")
EOF
