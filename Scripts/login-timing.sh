#!/usr/bin/env bash
# Times logins for a name with an account and for a name without one, against a real chat-server:
# what an attacker listing account names would compare (issue 35). A benchmark, not a test:
# AccountAttackTests asserts that both take a hashing job and get the same answers; this prints
# how long each takes.
set -euo pipefail

usage() {
    cat <<'USAGE'
Usage: Scripts/login-timing.sh [--logins N] [--mode memory|durable|cluster] [--binary PATH] [--no-build]

Builds chat-server (release) unless --no-build or --binary, starts it on 127.0.0.1 with a free
port (the guess windows raised, so that every login is checked), registers the account "victim",
then sends N wrong logins (default 200) for "victim" and N for "nobody" (no account), alternating,
one at a time on one connection from 127.0.0.1, and times each from its send to its answer.
Prints one Markdown table — median, 10th and 90th percentile, mean, and the answers — and stops
the server (and, in cluster mode, its redis-server) by PID.

  --logins N     wrong logins per name (default 200)
  --mode M       memory (--no-persistence), durable (a temporary --data-dir; the default), or
                 cluster (a redis-server of its own on a free port)
  --binary PATH  time this chat-server instead of building one (an older build, to compare);
                 the guess-window flags it does not know are left out
  --no-build     use the release binary already built
  -h, --help     this help
USAGE
}

logins=200 mode=durable build=1 binary=""
while [[ $# -gt 0 ]]; do
    case "$1" in
    --logins) logins="$2"; shift 2 ;;
    --mode) mode="$2"; shift 2 ;;
    --binary) binary="$2"; build=0; shift 2 ;;
    --no-build) build=0; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "login-timing.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
    esac
done
[[ $logins =~ ^[1-9][0-9]{0,4}$ ]] || { echo "login-timing.sh: --logins must be 1 to 99999" >&2; exit 2; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if [[ $build == 1 ]]; then flock /tmp/swift-build.lock swift build -c release --product chat-server >/dev/null; fi
[[ -n $binary ]] || binary="$(swift build -c release --show-bin-path)/chat-server"
work="$(mktemp -d)"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT

case "$mode" in
memory) storage=(--no-persistence) ;;
durable) storage=(--data-dir "$work/data") ;;
cluster)
    redis_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
    redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" >"$work/redis.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 1 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    storage=(--cluster "redis://127.0.0.1:$redis_port")
    ;;
*) echo "login-timing.sh: --mode must be memory, durable or cluster" >&2; exit 2 ;;
esac
windows=(--login-attempts-per-account 1000000 --login-attempts-per-address 1000000)
if "$binary" --help 2>/dev/null | grep -q -- --login-attempts-per-account-from-address; then
    windows+=(--login-attempts-per-account-from-address 1000000)
fi
"$binary" --host 127.0.0.1 --port 0 "${storage[@]}" "${windows[@]}" --handshake-timeout 60 --no-rate-limits \
    >"$work/out" 2>"$work/err" &
pids+=($!)
for _ in $(seq 1 100); do grep -q '^listening on' "$work/out" && break; sleep 0.1; done
if [[ $mode == cluster ]]; then
    for _ in $(seq 1 100); do grep -q 'cluster link up' "$work/err" && break; sleep 0.1; done
fi
port="$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$work/out" | head -1)"
[[ -n $port ]] || { echo "login-timing.sh: the server did not start:" >&2; cat "$work/err" >&2; exit 1; }

python3 - "$port" "$logins" "$mode" "$binary" <<'PY'
import socket, sys, time, statistics

port, logins, mode, binary = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]

def varint(n):
    out = bytearray()
    while n >= 0x80: out.append(n & 0x7F | 0x80); n >>= 7
    out.append(n); return bytes(out)
def string(s): b = s.encode(); return varint(len(b)) + b
def frame(t, body): return varint(len(body) + 1) + bytes([t]) + body
def hello(nick): return frame(0x01, varint(3) + string(nick) + b"\x00")
def login(account, pw): return frame(0x0F, string(account) + string(pw))
def register(pw): return frame(0x0E, string(pw))

class Reader:
    def __init__(self, sock): self.sock, self.buf = sock, b""
    def next(self):
        while True:
            n, shift, i = 0, 0, 0
            while i < len(self.buf):
                b = self.buf[i]; n |= (b & 0x7F) << shift; shift += 7; i += 1
                if b < 0x80: break
            else:
                i = -1
            if i > 0 and len(self.buf) >= i + n:
                body = self.buf[i:i + n]; self.buf = self.buf[i + n:]; return body
            chunk = self.sock.recv(65536)
            if not chunk: return None
            self.buf += chunk

def connect():
    s = socket.create_connection(("127.0.0.1", port)); s.settimeout(60)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1); return s

owner = connect(); owner.sendall(hello("victim") + register("the right one")); r = Reader(owner)
while (f := r.next())[0] not in (0x33, 0x42): pass
guesser = connect(); guesser.sendall(hello("guesser")); g = Reader(guesser)
while g.next()[0] != 0x20: pass
names = {24: "busy", 25: "authenticationFailed", 27: "throttled"}
times = {"victim": [], "nobody": []}
answers = {"victim": {}, "nobody": {}}
for i in range(logins * 2):
    name = "victim" if i % 2 == 0 else "nobody"
    start = time.perf_counter()
    guesser.sendall(login(name, f"wrong {i}"))
    while True:
        f = g.next()
        if f is None: sys.exit("the server closed the connection")
        if f[0] == 0x42: break
    times[name].append((time.perf_counter() - start) * 1000)
    code = f[1] | (f[2] << 7) if f[1] >= 0x80 else f[1]
    answers[name][names.get(code, str(code))] = answers[name].get(names.get(code, str(code)), 0) + 1
print(f"{logins} wrong logins per name, alternating, {mode} mode, {binary}")
print()
print("| name | median | p10 | p90 | mean | answers |")
print("| --- | --- | --- | --- | --- | --- |")
for name, label in (("victim", "victim (an account)"), ("nobody", "nobody (no account)")):
    t = sorted(times[name]); q = lambda p: t[min(len(t) - 1, int(len(t) * p))]
    print(f"| {label} | {statistics.median(t):.2f} ms | {q(0.1):.2f} ms | {q(0.9):.2f} ms | {statistics.mean(t):.2f} ms | {answers[name]} |")
PY
