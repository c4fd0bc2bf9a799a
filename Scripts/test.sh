#!/usr/bin/env bash
# Runs every test of the project, on a fresh machine too: installs what is missing, then runs
# the fuzzer, the socket layer's tests under ThreadSanitizer, a short load test, every attack of
# docs/SECURITY.md against the server in its default (durable) mode, and finally the
# whole test suite (unit, integration over loopback, end-to-end with the real executables and the
# real client in tmux). CI runs exactly this (.ci/run).
set -euo pipefail

usage() {
    cat <<'USAGE'
Usage: Scripts/test.sh [--fast]

Runs, in order:
  1. Scripts/bootstrap.sh         install libssl-dev, libedit-dev, pkg-config, tmux, openssl, redis-server, prometheus when missing
  2. Scripts/fuzz.sh              libFuzzer on the chat codec, the TLS record path, the RESP parser and the chat logic:
                                  built here, run for 180 s (FUZZ_SECONDS to change) at nice 10 beside step 6; the run
                                  fails at its end if the fuzzer found a crash
  3. swift test --sanitize=thread the socket layer's tests (SocketCore, SocketStreams) under TSan (.build-tsan/)
  4. Scripts/loadtest.sh --quick  a few seconds of load against a real server; fails on any loss
  5. Scripts/abuse.sh --check     every attack against the debug chat-server built first, in durable
                                  mode, 5 s each; fails if one succeeds (ABUSE_MODES to change, e.g.
                                  durable,memory,cluster)
     chat-client under ASan       chat-client built with --sanitize=address (.build-asan/), which
                                  every client test of step 6 runs
  6. swift test                   every test target, 8 at a time (SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH
                                  to change); its summary line closes the run

  --fast   skip steps 2-5 (for a quick local check; CI never passes it)
USAGE
}

fast=0
case "${1:-}" in
    -h | --help) usage; exit 0 ;;
    --fast) fast=1 ;;
    "") ;;
    *) echo "test.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
esac

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
step() { printf '\n==> %s\n' "$*"; }

step "bootstrap"
Scripts/bootstrap.sh

step "build"
swift build --build-tests

fuzz_pid=""
if [[ $fast -eq 0 ]]; then
    step "build the fuzz targets"
    Scripts/fuzz.sh --build-only

    step "the socket layer under ThreadSanitizer"
    # Only the socket layer's targets are declared (CHAT_PACKAGE_SUBSET, Package.swift): a TSan
    # build of the whole package took about 9 minutes of a 31-minute CI run. The tests that need
    # a chat-server run the plain build's.
    CHAT_PACKAGE_SUBSET=sockets CHAT_EXECUTABLES_DIR="$(swift build --show-bin-path)" swift test --scratch-path .build-tsan --sanitize=thread --filter "SocketCoreTests|SocketStreamsTests"

    step "quick load test"
    Scripts/loadtest.sh --quick

    # Bounded: a wedged server is killed by abuse.sh itself after 20 s, but a hung run must not
    # eat CI's 90 minutes either. On the build above, not a release build of its own: that took
    # 2 of CI's 19 minutes, and a debug server, several times slower, holds the checks no less
    # (docs/SECURITY.md's table is a release run's).
    step "attacks against the server (${ABUSE_MODES:-durable})"
    timeout 1800 Scripts/abuse.sh --debug --no-build --modes "${ABUSE_MODES:-durable}" --duration 5 --check

    # libedit once crashed chat-client on long pastes (docs/CLIENT.md); an out-of-bounds write
    # there can pass unnoticed without ASan. Every test of the client runs this build in step 6
    # (a whole run took no longer than with the plain one). Leaks are not checked: the client
    # leaves at exit.
    step "chat-client under AddressSanitizer, for the tests below"
    swift build --scratch-path .build-asan --sanitize=address --product chat-client
    export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 CHAT_CLIENT_EXECUTABLE="$root/.build-asan/debug/chat-client"
fi

# Swift Testing starts every test at once unless told otherwise. Hundreds of them start servers,
# Redis and tmux at the first second, and on two cores that stampede starved clients past the
# servers' 5 s hello deadline. Eight at a time still keep both cores busy (most tests wait on
# sockets): a whole run took 432 s, against 405 s with sixteen and 418 s with no limit, and
# sixteen still let a loaded moment stall a test's server for seconds now and then.
export SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH="${SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH:-8}"
if [[ $fast -eq 0 ]]; then
    # The fuzzers run beside the tests at a lower priority: the test run leaves about a core
    # idle for its five minutes (most tests wait on sockets), which they fill, so fuzzing costs
    # CI none of the minute it took as a step of its own. (Only the runs: the builds above went
    # first, as SwiftPM gives the compilers it starts back the normal priority, and they slowed
    # the steps beside them until an attack's client did not finish.) Their lines come in among
    # the tests'; the run fails at its end if they found a crash. In a session of their own
    # (setsid), so that an early exit stops them all. 180 s: at the lower priority 120 s ran
    # chatcore 7,982 inputs, where 60 s of a step of its own ran 11,518.
    step "fuzz the codecs and the chat logic for ${FUZZ_SECONDS:-180} s, at nice 10, beside the tests"
    setsid nice -n 10 Scripts/fuzz.sh --no-build "${FUZZ_SECONDS:-180}" &
    fuzz_pid=$!
    trap '[[ -n $fuzz_pid ]] && kill -- -"$fuzz_pid" 2>/dev/null; true' EXIT
fi
step "all tests, ${SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH} at a time"
swift test
if [[ -n $fuzz_pid ]]; then
    # Done well before the tests, so the tests' summary line above stays the run's last unless
    # the fuzzer failed.
    fuzz_status=0
    wait "$fuzz_pid" || fuzz_status=$?
    fuzz_pid=""
    [[ $fuzz_status -eq 0 ]] || { echo "test.sh: the fuzzer failed (its lines above say why)" >&2; exit 1; }
fi
