#!/usr/bin/env bash
# Measures what chat-server and chat-client cost before they do any work: binary size, the shared
# libraries they load, start-up time and idle resident memory. Numbers for docs/BENCHMARKS.md.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() {
    cat <<'EOF'
Usage: Scripts/footprint.sh [--bin DIR] [--runs N]

Measures chat-server and chat-client from DIR (default: builds release and uses .build/release):
  size        the executable's size on disk
  NEEDED      the libraries its ELF header asks for (readelf -d), and how many shared objects the
              loader maps in all (ldd), with their total size on disk
  start-up    from exec to the server's "listening on" line, and to the client's first line of
              output (pipe mode, connected and joined), median of N runs (default 20)
  idle RSS    VmRSS from /proc one second after that, median of N runs

Everything runs on 127.0.0.1 with an OS-chosen port; each server and client is stopped by PID.
To compare two builds, run it once per build (--bin other-checkout/.build/release).
EOF
}

bin=""
runs=20
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --bin) bin="$2"; shift 2 ;;
        --runs) runs="$2"; shift 2 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done
if [[ -z "$bin" ]]; then
    cd "$root"
    swift build -c release --product chat-server >&2
    swift build -c release --product chat-client >&2
    bin="$root/.build/release"
fi

for tool in chat-server chat-client; do
    exe="$bin/$tool"
    [[ -x "$exe" ]] || { echo "no $exe" >&2; exit 1; }
    needed="$(readelf -d "$exe" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
    mapped=($(ldd "$exe" | awk '/=> \// { print $3 }'))
    mapped_bytes=$(( $(stat -L -c %s "${mapped[@]}" | paste -sd+ -) ))
    echo "$tool: $(stat -c %s "$exe") bytes; NEEDED: $needed"
    echo "$tool: loader maps ${#mapped[@]} shared objects, $(( mapped_bytes / 1000000 )) MB on disk"
done

python3 - "$bin" "$runs" <<'EOF'
import os, signal, statistics, subprocess, sys, time

bin_dir, runs = sys.argv[1], int(sys.argv[2])

def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")

def first_line(process, limit=10):
    # One readline with a deadline: the process prints its line within a second when healthy.
    start = time.monotonic()
    line = process.stdout.readline()
    if not line or time.monotonic() - start > limit:
        raise RuntimeError(f"{process.args[0]} printed nothing within {limit} s")
    return line.decode()

server_starts, server_rss, client_starts, client_rss = [], [], [], []
for _ in range(runs):
    started = time.monotonic()
    server = subprocess.Popen([f"{bin_dir}/chat-server", "--host", "127.0.0.1", "--port", "0", "--no-persistence"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        line = first_line(server)
        server_starts.append(time.monotonic() - started)
        port = line.strip().rsplit(":", 1)[1]
        time.sleep(1)
        server_rss.append(rss_kib(server.pid))

        started = time.monotonic()
        client = subprocess.Popen([f"{bin_dir}/chat-client", "--host", "127.0.0.1", "--port", port,
                                   "--nick", "probe", "--room", "general"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            first_line(client)
            client_starts.append(time.monotonic() - started)
            time.sleep(1)
            client_rss.append(rss_kib(client.pid))
        finally:
            client.stdin.close()
            try:
                client.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.kill(client.pid, signal.SIGKILL)
                client.wait()
    finally:
        os.kill(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(server.pid, signal.SIGKILL)
            server.wait()

ms = lambda values: f"{statistics.median(values) * 1000:.1f} ms (min {min(values) * 1000:.1f})"
mib = lambda values: f"{statistics.median(values) / 1024:.1f} MiB (min {min(values) / 1024:.1f})"
print(f"chat-server: start-up to 'listening on' {ms(server_starts)}; idle RSS {mib(server_rss)}; {runs} runs")
print(f"chat-client: start-up to first line {ms(client_starts)}; idle RSS {mib(client_rss)}; {runs} runs")
EOF
