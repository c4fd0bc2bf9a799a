// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "SwiftSocketChat",
    products: [
        .library(name: "SocketStreams", targets: ["SocketStreams"]),
        .library(name: "ChatProtocol", targets: ["ChatProtocol"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
    ],
    targets: [
        // POSIX sockets + Dispatch sources, the Foundation stream bridge and the async API.
        .target(name: "SocketStreams"),
        // The classic NSStream chat-client pattern, running on Linux through Stream.getStreamsToHost.
        .executableTarget(name: "stream-chat-example", dependencies: ["SocketStreams"]),
        // The wire protocol: frames, encoder, incremental decoder. No I/O, no Foundation.
        .target(name: "ChatProtocol"),
        // Measures the wire protocol: size comparison with SOAP/JSON/IRC and codec throughput.
        .executableTarget(
            name: "chat-wire",
            dependencies: ["ChatProtocol", .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),

        .testTarget(name: "SocketStreamsTests", dependencies: ["SocketStreams"]),
        .testTarget(name: "ChatProtocolTests", dependencies: ["ChatProtocol"]),
    ],
    swiftLanguageModes: [.v6]
)
