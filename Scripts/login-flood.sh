#!/usr/bin/env bash
# Measures what a flood of wrong logins costs chat and an account's owner: a control client's
# echo latency (p50, p99, max) on a chat-server with no flood, then while 1,000 connections from
# 127.0.1.x–127.0.5.x send a wrong password each, in waves; the owner's own logins from 127.0.0.1
# meanwhile (how many got in, and how long each took); how the flood's logins were answered and
# the server's peak RSS. A benchmark, not a test: AccountTests and AccountAttackTests assert the
# behaviour (every login answered, chat delivered, RSS within --max-memory, the owner in); this
# prints the timings.
set -euo pipefail

usage() {
    cat <<'USAGE'
Usage: Scripts/login-flood.sh [--logins N] [--waves W] [--mode memory|durable] [--binary PATH] [--no-build]

Builds chat-server (release) unless --no-build, starts it on 127.0.0.1 with a free port
(--max-memory 256M --address-connection-rate 0, throttles raised so that the hashing queue, not
the guess windows, is what the flood meets), registers the account "victim", and runs a Python
control client that says a line and waits for its echo, 200 times, first with no flood, then while
N logins (default 1000) arrive in W waves (default 10), each from its own address (200 to a /24:
127.0.1.x, 127.0.2.x, …). Meanwhile the account "owner" logs in from 127.0.0.1 every 0.3 s, each
time on a new connection. Prints one Markdown table, and stops the server by its PID.

  --logins N   wrong logins in all (default 1000)
  --waves W    how many waves they come in (default 10)
  --mode M     memory (--no-persistence) or durable (a temporary --data-dir; the default)
  --binary P   measure this chat-server instead of building one (an older build, to compare)
  --no-build   use the release binary already built
  -h, --help   this help
USAGE
}

logins=1000 waves=10 mode=durable build=1 binary=""
while [[ $# -gt 0 ]]; do
    case "$1" in
    --binary) binary="$2"; build=0; shift 2 ;;
    --logins) logins="$2"; shift 2 ;;
    --waves) waves="$2"; shift 2 ;;
    --mode) mode="$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "login-flood.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
    esac
done

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if [[ $build == 1 ]]; then flock /tmp/swift-build.lock swift build -c release --product chat-server >/dev/null; fi
[[ -n $binary ]] || binary="$(swift build -c release --show-bin-path)/chat-server"
work="$(mktemp -d)"
storage=(--no-persistence)
[[ $mode == durable ]] && storage=(--data-dir "$work/data")
"$binary" --host 127.0.0.1 --port 0 "${storage[@]}" --max-memory 256M --max-clients 4000 \
    --address-connection-rate 0 --login-attempts-per-account 1000000 --login-attempts-per-address 1000000 \
    --handshake-timeout 60 >"$work/out" 2>"$work/err" &
server=$!
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 1 100); do grep -q '^listening on' "$work/out" && break; sleep 0.1; done
port="$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$work/out" | head -1)"

python3 - "$port" "$logins" "$waves" "$server" <<'PY'
import socket, sys, time, statistics

port, logins, waves, pid = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

def varint(n):
    out = bytearray()
    while n >= 0x80: out.append(n & 0x7F | 0x80); n >>= 7
    out.append(n); return bytes(out)
def string(s): b = s.encode(); return varint(len(b)) + b
def frame(t, body): return varint(len(body) + 1) + bytes([t]) + body
def hello(nick): return frame(0x01, varint(3) + string(nick) + b"\x00")
def login(account, pw): return frame(0x0F, string(account) + string(pw))
def register(pw): return frame(0x0E, string(pw))
def join(room): return frame(0x03, string(room))
def say(room, text): return frame(0x05, string(room) + text.encode())

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

def connect(source="127.0.0.1"):
    s = socket.socket(); s.bind((source, 0)); s.connect(("127.0.0.1", port)); s.settimeout(60); return s

for account in ("victim", "owner"):
    s = connect(); s.sendall(hello(account) + register("the right one")); r = Reader(s)
    while (f := r.next())[0] not in (0x33, 0x42): pass
    s.close()
control = connect(); control.sendall(hello("control") + join("bench")); cr = Reader(control)
while not ((f := cr.next())[0] == 0x24): pass

def measure(count):
    times = []
    for i in range(count):
        start = time.perf_counter(); control.sendall(say("bench", f"ping {i}"))
        while True:
            f = cr.next()
            if f[0] == 0x21 and f.endswith(f"ping {i}".encode()): break
        times.append((time.perf_counter() - start) * 1000)
        time.sleep(0.03)  # under the 50 frames/s rate limit
    times.sort()
    return times[len(times) // 2], times[int(len(times) * 0.99) - 1], times[-1]

quiet = measure(200)
flood, answers = [], {}
per_wave = logins // waves
import threading
results = []
def run_control(): results.append(measure(200))
t = threading.Thread(target=run_control); t.start()
owner_times, owner_answers, flooding = [], {}, [True]
def run_owner():
    n = 0
    while flooding[0]:
        n += 1
        start = time.perf_counter()
        s = connect(); s.sendall(hello(f"owner{n}") + login("owner", "the right one")); rd = Reader(s)
        while True:
            f = rd.next()
            if f is None: kind = "closed"; break
            if f[0] == 0x34: kind = "loggedIn"; break
            if f[0] == 0x42:
                code = f[1] | (f[2] << 7) if f[1] >= 0x80 else f[1]
                kind = {24: "busy", 25: "authenticationFailed", 27: "throttled"}.get(code, str(code)); break
        owner_times.append((time.perf_counter() - start) * 1000)
        owner_answers[kind] = owner_answers.get(kind, 0) + 1
        s.close()
        time.sleep(0.3)
o = threading.Thread(target=run_owner); o.start()
for wave in range(waves):
    for i in range(per_wave):
        k = wave * per_wave + i
        s = connect(f"127.0.{1 + k // 200}.{2 + k % 200}")
        s.sendall(hello(f"f{k}") + login("victim", f"wrong {k}")); flood.append(s)
    time.sleep(0.6)  # the waves span the control client's 200 echoes (about 6 s)
t.join()
flooding[0] = False; o.join()
names = {24: "busy", 25: "authenticationFailed", 27: "throttled"}
for s in flood:
    rd = Reader(s)
    while True:
        f = rd.next()
        if f is None: answers["closed"] = answers.get("closed", 0) + 1; break
        if f[0] == 0x42:
            code = f[1] | (f[2] << 7) if f[1] >= 0x80 else f[1]
            answers[names.get(code, str(code))] = answers.get(names.get(code, str(code)), 0) + 1; break
    s.close()
peak = [l.split()[1] for l in open(f"/proc/{pid}/status") if l.startswith("VmHWM")][0]
print("| run | control p50 | control p99 | control max |")
print("| --- | --- | --- | --- |")
print(f"| no flood | {quiet[0]:.2f} ms | {quiet[1]:.2f} ms | {quiet[2]:.2f} ms |")
print(f"| {logins} wrong logins in {waves} waves | {results[0][0]:.2f} ms | {results[0][1]:.2f} ms | {results[0][2]:.2f} ms |")
print()
ot = sorted(owner_times)
print(f"the owner's logins during the flood: {owner_answers}; median {ot[len(ot) // 2]:.1f} ms, max {ot[-1]:.1f} ms")
print(f"answers: {answers}; server peak RSS {int(peak) / 1024:.1f} MiB (--max-memory 256M)")
PY
