import ArgumentParser

/// Measures the chat wire protocol: how big its frames are next to SOAP, JSON and IRC, and
/// how fast the codec runs.
@main
struct ChatWire: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "chat-wire",
        abstract: "Measure the chat wire protocol (docs/PROTOCOL.md).",
        discussion: """
            sizes  compares the bytes of our frames with SOAP 1.1, SOAP 1.2, JSON over HTTP
                   and IRC for representative chat operations.
            bench  measures encode and decode throughput; run it from a release build:
                   swift run -c release chat-wire bench
            """,
        subcommands: [Sizes.self, Bench.self])
}
