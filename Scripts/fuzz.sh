#!/usr/bin/env bash
# Fuzzes the ChatProtocol codec, SocketTLS's record path, the RESP parser and the chat logic (ChatCore) with
# libFuzzer: builds the targets of Fuzz/ and runs them side by side for the given time. Exits non-zero if any
# finds a crash.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: Scripts/fuzz.sh [SECONDS]
       Scripts/fuzz.sh --build-only
       Scripts/fuzz.sh --no-build [SECONDS]
       Scripts/fuzz.sh --refresh-seeds

Fuzzes the ChatProtocol codec (Sources/ChatProtocol), SocketTLS's record path
(Sources/SocketTLS), the RESP parser (Sources/RedisProtocol) and the chat logic
(ChatCore, on the room log of Sources/RoomLog) with libFuzzer for SECONDS (default 60) per target; all
targets run at once, so the wall time is about SECONDS plus a minute or two of building.

Targets (Fuzz/*.swift, checking Tests/ChatProtocolTests/FuzzProperties.swift,
Tests/SocketTLSTests/TLSFuzzProperties.swift, Tests/RedisProtocolTests/RESPFuzzProperties.swift
and Tests/ChatServerTests/ChatCoreFuzzProperties.swift):
  decode     arbitrary bytes fed to FrameDecoder whole and in chunks: no crash, the
             same frames either way, re-encoding reproduces the bytes, bounded buffering.
  roundtrip  arbitrary bytes turned into a valid frame: encode -> decode is the identity.
  tls        arbitrary bytes as a hostile TLS peer (never plaintext, a sticky typed error,
             bounded memory, the same verdict however the bytes are cut), or as the
             schedule of a conversation between two sessions with perhaps one flipped
             byte (all data arrives intact, or only a prefix of it: never altered).
  resp       arbitrary bytes as a Redis server's replies into RESPParser, whole and in
             chunks, with default and tight limits: no crash, the same values and error
             either way, every value encodes to bytes that parse back to it.
  chatcore   arbitrary bytes as a scenario driven through ChatCore, on the memory store,
             SQLite in a temporary directory, or as a cluster node answered by a model of
             Redis: connections, valid frames of every type with integers at their edges,
             broken bytes through FrameDecoder, time steps, disconnects, commits that
             succeed or fail, restarts; on a cluster node, answers in any order that succeed,
             fail or refuse, room events between them, other nodes' events, ghosts and
             kills, Redis going away. After every step the core's accounting agrees with
             what it holds and stays within a small memory budget, each member's seq only
             grows per room, every frame sent fits the protocol and suits the client's
             version; a node's held frames are counted right, and once Redis has answered
             everything no client still waits.

Builds with `swiftc -sanitize=fuzzer,address` into .build-fuzz/; chatcore links against
RoomLog and its dependencies built by SwiftPM with the same sanitizers into
.build-fuzz-roomlog/ (a minute or two in a fresh clone, seconds after). Seeds come from
Fuzz/corpus/<target>/ and Fuzz/regressions/<target>/; inputs the fuzzer finds
interesting go to Fuzz/corpus-work/<target>/ (not committed). A crash is saved as
Fuzz/crash-<target>-*; copy it into Fuzz/regressions/<target>/ with a descriptive
name, and the test suite replays it from then on.

FUZZ_TARGETS="chatcore resp" runs only those targets.

Environment for chatcore: CHATCORE_FUZZ_STORE=memory, sqlite or cluster runs every input on
that backend; CHATCORE_FUZZ_TRACE=1 prints each event of an input and each frame sent, to read a crash:
  CHATCORE_FUZZ_TRACE=1 .build-fuzz/fuzz-chatcore Fuzz/crash-chatcore-...

  --build-only     build the targets and stop.
  --no-build       fuzz with the targets already built (by --build-only): Scripts/test.sh
                   builds them first and fuzzes later, at a low priority beside its tests.
  --refresh-seeds  rewrite Fuzz/corpus/decode/spec-*.bin from the ```hex examples of
                   docs/PROTOCOL.md (a test checks that they agree).
  -h, --help       show this help.
EOF
}

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
read -ra targets <<<"${FUZZ_TARGETS:-decode roundtrip tls resp chatcore}"
seconds=60

refresh_seeds() {
    local dir="$root/Fuzz/corpus/decode" name="" hex="" in_block=0
    rm -f "$dir"/spec-*.bin
    mkdir -p "$dir"
    while IFS= read -r line; do
        if [[ $in_block == 0 && $line =~ ^\`\`\`hex\ +([A-Za-z0-9_-]+) ]]; then
            name="${BASH_REMATCH[1]}" hex="" in_block=1
        elif [[ $in_block == 1 && $line == '```' ]]; then
            # Each pair of hex digits becomes one byte.
            printf '%b' "$(sed 's/../\\x&/g' <<<"$hex")" >"$dir/spec-$name.bin"
            in_block=0
        elif [[ $in_block == 1 ]]; then
            line="${line%%#*}"
            hex+="${line//[[:space:]]/}"
        fi
    done <"$root/docs/PROTOCOL.md"
    echo "wrote $(ls "$dir"/spec-*.bin | wc -l) seeds to Fuzz/corpus/decode/"
}

build_targets=1
run_targets=1
case "${1:-}" in
    -h | --help) usage; exit 0 ;;
    --refresh-seeds) refresh_seeds; exit 0 ;;
    --build-only) run_targets=0; shift ;;
    --no-build) build_targets=0; shift ;;
esac
case "${1:-}" in
    "") ;;
    *[!0-9]* | 0) echo "fuzz.sh: SECONDS must be a positive whole number, not '$1'" >&2; usage >&2; exit 2 ;;
    *) seconds="$1" ;;
esac

build="$root/.build-fuzz"
mkdir -p "$build"
# Swift's backtracer would otherwise intercept the crash before libFuzzer reports it.
export SWIFT_BACKTRACE=enable=no

build_all() {
    codec=("$root"/Sources/ChatProtocol/*.swift "$root/Tests/ChatProtocolTests/FuzzProperties.swift")
    core_build="$root/.build-fuzz-roomlog"
    # RoomLog needs five Swift modules of ours and two packages: SwiftPM builds them (from its local
    # package copies), instrumented. `-sanitize=fuzzer,address` goes through -Xswiftc because
    # `--sanitize fuzzer --sanitize address` reaches swiftc as two flags, of which only the last
    # counts: no coverage. -enable-testing lets the properties read the core's internal state.
    echo "building RoomLog for chatcore (log: .build-fuzz/chatcore-build.log) ..."
    swift build -c release --target RoomLog --scratch-path "$core_build" \
        -Xswiftc -sanitize=fuzzer,address -Xswiftc -enable-testing >"$build/chatcore-build.log" 2>&1 ||
        { tail -n 40 "$build/chatcore-build.log" >&2; exit 1; }
    # Only RoomLog and what it depends on are ever built in this scratch path, so every target's
    # objects link: a Swift target's as its output file map names them (an object of a source file
    # since moved or deleted stays in the directory, and would define its symbols twice or name
    # ones that are gone), a C target's all.
    core_objects=()
    shopt -s nullglob
    for target_dir in "$core_build"/release/*.build; do
        if [[ -f $target_dir/output-file-map.json ]]; then
            while IFS= read -r object; do
                if [[ -f $object ]]; then core_objects+=("$object"); fi
            done < <(grep -o '"object" *: *"[^"]*"' "$target_dir/output-file-map.json" | sed 's/.*: *"\(.*\)"/\1/')
        else
            core_objects+=("$target_dir"/*.o)
        fi
    done
    shopt -u nullglob

    tls_tests="$root/Tests/SocketTLSTests"
    builds=()
    for target in "${targets[@]}"; do
        case $target in
            decode) sources=("${codec[@]}" "$root/Fuzz/DecodeTarget.swift") module=ChatProtocolFuzz links=() ;;
            roundtrip) sources=("${codec[@]}" "$root/Fuzz/RoundTripTarget.swift") module=ChatProtocolFuzz links=() ;;
            tls)
                sources=("$root"/Sources/SocketTLS/*.swift "$tls_tests/TLSFuzzProperties.swift" "$tls_tests/TestPKI.swift"
                    "$tls_tests/TLSFixture.swift" "$tls_tests/SessionPair.swift" "$root/Fuzz/TLSTarget.swift")
                module=SocketTLSFuzz links=(-I "$root/Sources/COpenSSL" -lssl -lcrypto) ;;
            resp)
                sources=("$root"/Sources/RedisProtocol/*.swift "$root/Tests/RedisProtocolTests/RESPFuzzProperties.swift"
                    "$root/Fuzz/RESPTarget.swift")
                module=RedisProtocolFuzz links=() ;;
            chatcore)
                sources=("$root/Tests/ChatServerTests/ChatCoreFuzzProperties.swift" "$root/Tests/ChatServerTests/ChatCoreFuzzCluster.swift"
                    "$root/Fuzz/ChatCoreTarget.swift")
                module=ChatCoreFuzz
                links=(-I "$core_build/release/Modules" -Xcc "-fmodule-map-file=$core_build/release/CSocketShims.build/module.modulemap"
                    -Xcc -I -Xcc "$root/Sources/CSocketShims/include" -Xcc "-fmodule-map-file=$root/Sources/COpenSSL/module.modulemap"
                    -Xcc "-fmodule-map-file=$root/Sources/CSQLite/module.modulemap"
                    "${core_objects[@]}" -lsqlite3 -lssl -lcrypto) ;;
        esac
        # Two at a time, one per core: each whole-module -O compile is single-threaded.
        while (($(jobs -rp | wc -l) >= 2)); do sleep 0.5; done
        echo "building $target ..."
        swiftc -sanitize=fuzzer,address -parse-as-library -O -g -D FUZZING \
            -module-name "$module" "${links[@]}" "${sources[@]}" \
            -o "$build/fuzz-$target" 2> >(grep -v 'Cannot export local symbol' >&2) &
        builds+=($!)
    done
    for pid in "${builds[@]}"; do
        wait "$pid" || { echo "fuzz.sh: a target did not build (its errors are above)" >&2; exit 1; }
    done
}

if [[ $build_targets -eq 1 ]]; then build_all; fi
if [[ $run_targets -eq 0 ]]; then exit 0; fi
for target in "${targets[@]}"; do
    [[ -x $build/fuzz-$target ]] || { echo "fuzz.sh: $build/fuzz-$target is not built (Scripts/fuzz.sh --build-only)" >&2; exit 1; }
done

pids=()
for target in "${targets[@]}"; do
    work="$root/Fuzz/corpus-work/$target"
    mkdir -p "$work" "$root/Fuzz/corpus/$target" "$root/Fuzz/regressions/$target"
    # chatcore's SQLite runs leave allocations to the store's threads and SQLite's caches, so
    # every run would look like a leak and cost a LeakSanitizer scan (74 runs/s instead of 470).
    extra=()
    [[ $target == chatcore ]] && extra=(-detect_leaks=0)
    echo "fuzzing $target for ${seconds}s (log: .build-fuzz/$target.log)"
    "$build/fuzz-$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 "${extra[@]}" \
        -artifact_prefix="$root/Fuzz/crash-$target-" -print_final_stats=1 \
        "$work" "$root/Fuzz/corpus/$target" "$root/Fuzz/regressions/$target" \
        >"$build/$target.log" 2>&1 &
    pids+=($!)
done

failed=0
for index in "${!targets[@]}"; do
    target="${targets[$index]}"
    if wait "${pids[$index]}"; then
        runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$build/$target.log" | grep -o '[0-9]*$' || echo '?')
        echo "$target: no crash in ${seconds}s, $runs inputs run"
    else
        failed=1
        echo "$target: FAILED; end of its log:" >&2
        tail -n 40 "$build/$target.log" >&2
        echo "Copy the crash input into Fuzz/regressions/$target/ and fix the code." >&2
    fi
done
exit "$failed"
