// swift-tools-version: 6.0
import PackageDescription

let argumentParser = Target.Dependency.product(name: "ArgumentParser", package: "swift-argument-parser")
let logging = Target.Dependency.product(name: "Logging", package: "swift-log")
let metrics = Target.Dependency.product(name: "CoreMetrics", package: "swift-metrics")
let prometheus = Target.Dependency.product(name: "Prometheus", package: "swift-prometheus")

let package = Package(
    name: "SwiftSocketChat",
    products: [
        .library(name: "SocketCore", targets: ["SocketCore"]),
        .library(name: "SocketStreams", targets: ["SocketStreams"]),
        .library(name: "SocketTLS", targets: ["SocketTLS"]),
        .library(name: "ChatProtocol", targets: ["ChatProtocol"]),
        .executable(name: "chat-server", targets: ["chat-server"]),
        .executable(name: "chat-client", targets: ["chat-client"]),
        .executable(name: "chat-loadtest", targets: ["chat-loadtest"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.1.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", from: "0.1.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
    ],
    targets: [
        // The few libc calls Swift's Glibc module does not import (accept4).
        .target(name: "CSocketShims"),
        // POSIX sockets + Dispatch sources and the async API; no Foundation, so what links only this
        // (the server, the load tester) does not carry Foundation and ICU.
        .target(
            name: "SocketCore",
            dependencies: ["CSocketShims", "SocketTLS", .product(name: "DequeModule", package: "swift-collections")]),
        // Redis's wire protocol (RESP2): the parser and encoder the cluster mode's Redis client
        // speaks through; bytes only, no sockets, so it is tested and fuzzed on its own.
        .target(name: "RedisProtocol"),
        // A Redis connection on SocketCore's channel: pipelined commands and subscriber mode, on the
        // owner's queue. Ours because the Swift Redis clients on this machine need SwiftNIO.
        // The cluster mode's shared state in Redis: room logs with one seq order (docs/CLUSTER.md).
        .target(name: "ChatCluster", dependencies: ["ChatCore", "ChatProtocol", "RedisClient", "RedisProtocol", "SocketCore"]),
        .target(
            name: "RedisClient",
            dependencies: ["RedisProtocol", "SocketCore", .product(name: "DequeModule", package: "swift-collections")]),
        // OpenSSL 3 from Debian's libssl-dev, found with pkg-config; shim.h wraps the macros Swift
        // cannot import.
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        // TLS 1.2/1.3 as a per-connection state machine over memory BIOs: ciphertext in, plaintext
        // out and back, never a socket. SocketChannel carries one (docs/TLS.md).
        .target(name: "SocketTLS", dependencies: ["COpenSSL"]),
        // Stream.getStreamsToHost / getBoundStreams for Linux: Foundation's InputStream/OutputStream
        // on SocketCore. Apps written for Apple's NSStream API import this.
        .target(name: "SocketStreams", dependencies: ["SocketCore", "SocketTLS"]),
        // The classic NSStream chat-client pattern, running on Linux through Stream.getStreamsToHost.
        .executableTarget(name: "stream-chat-example", dependencies: ["SocketStreams"]),

        // The wire protocol: frames, encoder, incremental decoder. No I/O, no Foundation.
        .target(name: "ChatProtocol"),
        // The same operations as SOAP, JSON-over-HTTP and IRC messages, for size comparisons. Only the
        // measuring tools link it, not the protocol's users.
        .target(name: "ChatWireComparison", dependencies: ["ChatProtocol"]),
        // Measures the wire protocol: the size table and codec throughput.
        .executableTarget(name: "chat-wire", dependencies: ["ChatProtocol", "ChatWireComparison", argumentParser]),

        // SQLite 3 from Debian's libsqlite3-dev, through its C API: one writer and one reader
        // connection and a few prepared statements need no Foundation-based wrapper (GRDB would
        // bring Foundation and ICU back into chat-server; docs/ARCHITECTURE.md).
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        // Rooms on disk: a small typed wrapper over SQLite, the schema, commits, paging, retention.
        .target(name: "ChatStorage", dependencies: ["CSQLite", "ChatCore", "ChatProtocol"]),

        // libsodium from Debian's libsodium-dev, for Argon2id password hashes (docs/ARCHITECTURE.md).
        .systemLibrary(name: "CSodium", pkgConfig: "libsodium", providers: [.apt(["libsodium-dev"])]),
        // Accounts: Argon2id password hashes and the bounded pool that computes them off the event loop.
        // and the account records behind one seam (AccountStore): memory, or SQLite in the data directory.
        .target(
            name: "ChatAccounts",
            dependencies: ["CSodium", "ChatCore", "SocketCore", "ChatProtocol", "ChatStorage", .product(name: "DequeModule", package: "swift-collections")]),

        // The chat rules without I/O (docs/ARCHITECTURE.md): imports only the wire protocol and the
        // standard library's collections, so the compiler keeps sockets, storage and Redis out.
        .target(name: "ChatCore", dependencies: ["ChatProtocol", .product(name: "DequeModule", package: "swift-collections")]),

        // The room log the server commits to and reads from (`RoomStore`): in memory, or durable
        // (the journal in front of SQLite, its commits, reads and upkeep). No sockets; the chat
        // fuzzer links it without the server.
        .target(name: "RoomLog", dependencies: ["ChatCore", "ChatProtocol", "ChatStorage", "SocketCore", logging]),

        // The Dispatch glue that serves ChatCore: sockets, the event loop, commits, the cluster node.
        .target(
            name: "ChatServer",
            dependencies: [
                "ChatCore", "RoomLog", "SocketCore", "SocketTLS", "ChatProtocol", "ChatStorage", "ChatCluster", "RedisProtocol", "ChatAccounts", logging,
                metrics,
                .product(name: "DequeModule", package: "swift-collections"),
            ]),
        .executableTarget(
            name: "chat-server",
            dependencies: [
                "ChatServer", "RoomLog", "ChatStorage", "ChatAccounts", "ConfigFormat", "SocketCore", "SocketTLS", argumentParser, logging,
                metrics, prometheus,
                // `chat-server account --cluster` writes a cluster's accounts through ChatCluster's scripts.
                "ChatCluster", "RedisClient",
            ]),

        // The strict TOML subset both config files are written in (the client's, and the server's
        // --config), with errors that name the line, and the password files both take (a pipe or a
        // FIFO too); no Foundation, so chat-server stays without it.
        .target(name: "ConfigFormat"),
        // The terminal client's session logic: connection, commands, completion, rendering, reconnect.
        .target(
            name: "ChatClient",
            dependencies: [
                "SocketCore", "SocketTLS", "ChatProtocol", "ConfigFormat", .product(name: "DequeModule", package: "swift-collections"),
            ]),
        // libedit from Debian's libedit-dev, through its native API (histedit.h) only: shim.h wraps
        // the variadic calls Swift cannot make (docs/CLIENT.md says why not the readline layer).
        .systemLibrary(name: "CLibEdit", pkgConfig: "libedit", providers: [.apt(["libedit-dev"])]),
        .executableTarget(name: "chat-client", dependencies: ["ChatClient", "CLibEdit", "ConfigFormat", "SocketTLS", argumentParser]),

        // Load generation and exact delivery accounting.
        .target(
            name: "ChatLoadTest",
            dependencies: [
                "ChatProtocol", "SocketCore", "SocketTLS", "ChatWireComparison", .product(name: "Histogram", package: "hdrhistogram-swift"),
            ]
        ),
        .executableTarget(name: "chat-loadtest", dependencies: ["ChatLoadTest", "SocketTLS", argumentParser]),
        // Plays the attacks of docs/SECURITY.md against a server; Scripts/abuse.sh runs them all.
        .executableTarget(
            name: "chat-abuse",
            dependencies: ["ChatProtocol", "SocketCore", argumentParser, .product(name: "Histogram", package: "hdrhistogram-swift")]),

        // Helpers that several test targets share (descriptor counts, child processes).
        .target(
            name: "TestSupport", dependencies: ["SocketCore", "SocketTLS", "ChatProtocol"], path: "Tests/TestSupport",
            // C compiled by the tests that need it, into a library Redis preloads (HandHeldWallClock).
            exclude: ["WallClock"]),
        .testTarget(name: "SocketCoreTests", dependencies: ["SocketCore", "TestSupport"]),
        .testTarget(name: "SocketStreamsTests", dependencies: ["SocketStreams", "SocketCore", "SocketTLS", "ChatProtocol", "TestSupport"]),
        .testTarget(name: "SocketTLSTests", dependencies: ["SocketTLS", "COpenSSL", "SocketCore", "TestSupport"]),
        .testTarget(name: "ChatProtocolTests", dependencies: ["ChatProtocol"]),
        .testTarget(name: "ChatWireComparisonTests", dependencies: ["ChatWireComparison", "ChatProtocol"]),
        .testTarget(name: "RedisProtocolTests", dependencies: ["RedisProtocol"]),
        .testTarget(name: "ChatClusterTests", dependencies: ["ChatCluster", "ChatCore", "RedisClient", "RedisProtocol", "TestSupport"]),
        .testTarget(name: "RedisClientTests", dependencies: ["RedisClient", "RedisProtocol", "SocketCore", "TestSupport"]),
        .testTarget(name: "ChatAccountsTests", dependencies: ["ChatAccounts", "ChatCore", "SocketCore", "TestSupport"]),
        .testTarget(name: "ChatCoreTests", dependencies: ["ChatCore"]),
        .testTarget(name: "ChatStorageTests", dependencies: ["ChatStorage", "ChatCore", "CSQLite", "ChatProtocol", "TestSupport"]),
        .testTarget(
            name: "ChatServerTests",
            dependencies: [
                "ChatCore", "ChatServer", "RoomLog", "ChatStorage", "ChatAccounts", "ChatClient", "ChatCluster", "RedisClient", "SocketCore", "SocketTLS", "ChatProtocol",
                "TestSupport",
            ]),
        .testTarget(name: "ChatClientTests", dependencies: ["ChatClient", "ChatProtocol", "SocketCore", "TestSupport"]),
        .testTarget(name: "ChatLoadTestTests", dependencies: ["ChatLoadTest", "ChatProtocol", "SocketCore", "TestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)

// `CHAT_PACKAGE_SUBSET=sockets`: the socket layer and its tests alone. Scripts/test.sh runs those
// tests under ThreadSanitizer, and SwiftPM links every test target into one bundle: declaring the
// whole package there built every module with TSan (about 9 minutes of a 31-minute CI run) for
// 70 tests of two targets. The example stays: SocketStreamsTests run it.
if Context.environment["CHAT_PACKAGE_SUBSET"] == "sockets" {
    let kept: Set = [
        "CSocketShims", "COpenSSL", "SocketTLS", "SocketCore", "SocketStreams", "stream-chat-example", "ChatProtocol", "TestSupport",
        "SocketCoreTests", "SocketStreamsTests",
    ]
    package.targets.removeAll { !kept.contains($0.name) }
    package.products.removeAll()
    package.dependencies.removeAll { dependency in
        guard case .sourceControl(_, let location, _) = dependency.kind else { return true }
        return !location.hasSuffix("/swift-collections")
    }
}
