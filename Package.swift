// swift-tools-version: 6.0
import PackageDescription

let argumentParser = Target.Dependency.product(name: "ArgumentParser", package: "swift-argument-parser")
let logging = Target.Dependency.product(name: "Logging", package: "swift-log")

let package = Package(
    name: "SwiftSocketChat",
    products: [
        .library(name: "SocketStreams", targets: ["SocketStreams"]),
        .library(name: "ChatProtocol", targets: ["ChatProtocol"]),
        .executable(name: "chat-server", targets: ["chat-server"]),
        .executable(name: "chat-client", targets: ["chat-client"]),
        .executable(name: "chat-loadtest", targets: ["chat-loadtest"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", from: "0.1.0"),
    ],
    targets: [
        // The few libc calls Swift's Glibc module does not import (accept4).
        .target(name: "CSocketShims"),
        // POSIX sockets + Dispatch sources, the Foundation stream bridge and the async API.
        .target(name: "SocketStreams", dependencies: ["CSocketShims"]),
        // The classic NSStream chat-client pattern, running on Linux through Stream.getStreamsToHost.
        .executableTarget(name: "stream-chat-example", dependencies: ["SocketStreams"]),

        // The wire protocol: frames, encoder, incremental decoder. No I/O, no Foundation.
        .target(name: "ChatProtocol"),
        // Measures the wire protocol: size comparison with SOAP/JSON/IRC and codec throughput.
        .executableTarget(name: "chat-wire", dependencies: ["ChatProtocol", argumentParser]),

        // Chat state (rooms, nicks, history, limits) as plain logic, plus the Dispatch glue that serves it.
        .target(name: "ChatServer", dependencies: ["SocketStreams", "ChatProtocol", logging]),
        .executableTarget(name: "chat-server", dependencies: ["ChatServer", argumentParser, logging]),

        // libedit, found through pkg-config; Debian's libedit-dev provides it.
        .systemLibrary(name: "CLibEdit", pkgConfig: "libedit", providers: [.apt(["libedit-dev"])]),
        // Client session logic shared by the terminal client and the load tester: connection,
        // commands, completion, rendering, reconnect.
        .target(name: "ChatClient", dependencies: ["SocketStreams", "ChatProtocol"]),
        .executableTarget(name: "chat-client", dependencies: ["ChatClient", "CLibEdit", argumentParser]),

        // Load generation and exact delivery accounting.
        .target(
            name: "ChatLoadTest",
            dependencies: ["ChatClient", "ChatProtocol", "SocketStreams", .product(name: "Histogram", package: "hdrhistogram-swift")]
        ),
        .executableTarget(name: "chat-loadtest", dependencies: ["ChatLoadTest", argumentParser]),

        .testTarget(name: "SocketStreamsTests", dependencies: ["SocketStreams"]),
        .testTarget(name: "ChatProtocolTests", dependencies: ["ChatProtocol"]),
        .testTarget(name: "ChatServerTests", dependencies: ["ChatServer", "ChatClient", "SocketStreams", "ChatProtocol"]),
        .testTarget(name: "ChatClientTests", dependencies: ["ChatClient", "ChatProtocol", "SocketStreams"]),
        .testTarget(name: "ChatLoadTestTests", dependencies: ["ChatLoadTest", "ChatClient", "ChatProtocol", "SocketStreams"]),
    ],
    swiftLanguageModes: [.v6]
)
