/// What the command line asks for. Parsed by hand: this example depends on nothing but SocketStreams.
enum ExampleOptions: Equatable {
    /// Connect to a relay and chat.
    case client(host: String, port: Int, nick: String)
    /// Run the line relay.
    case relay(port: Int)
    /// Print `usage` and exit.
    case help

    static let usage = """
        stream-chat-example: the classic NSStream chat client, running on Linux through
        Stream.getStreamsToHost, plus a tiny line relay to try it against.

        USAGE
          stream-chat-example --serve --port PORT
          stream-chat-example --host HOST --port PORT [--nick NICK]

        OPTIONS
          --serve        Run the relay: every line a client sends goes to every other client.
                         Listens on all local IPv4 and IPv6 addresses; PORT 0 picks a free port,
                         and the relay prints the one it got.
          --host HOST    Relay to connect to: a name (localhost) or an address (127.0.0.1, ::1).
          --port PORT    TCP port of the relay.
          --nick NICK    Name shown before your lines (default: $USER, or "guest").
          -h, --help     Show this help.

        TRY IT (three terminals)
          stream-chat-example --serve --port 7000
          stream-chat-example --host localhost --port 7000 --nick alice
          stream-chat-example --host localhost --port 7000 --nick bob
        Type a line in one client and it appears in the other. End a client with Ctrl-D.
        """

    /// Reads `arguments` (without the program name).
    static func parse(_ arguments: [String], environment: [String: String]) throws(UsageError) -> ExampleOptions {
        var serve = false
        var host: String?
        var port: Int?
        var nick: String?
        var remaining = arguments[...]
        while let argument = remaining.popFirst() {
            switch argument {
            case "-h", "--help":
                return .help
            case "--serve":
                serve = true
            case "--host", "--port", "--nick":
                guard let value = remaining.popFirst(), !value.hasPrefix("--") else {
                    throw UsageError("\(argument) needs a value")
                }
                switch argument {
                case "--host": host = value
                case "--nick": nick = value
                default:
                    guard let number = Int(value), (0...65535).contains(number) else {
                        throw UsageError("--port must be a number from 0 to 65535, not '\(value)'")
                    }
                    port = number
                }
            default:
                throw UsageError("unknown argument '\(argument)'")
            }
        }
        guard let port else { throw UsageError("--port is required") }
        if serve {
            guard host == nil, nick == nil else { throw UsageError("--serve takes only --port") }
            return .relay(port: port)
        }
        guard let host else { throw UsageError("--host is required (or --serve to run the relay)") }
        guard port != 0 else { throw UsageError("--port 0 only makes sense with --serve") }
        let name = nick ?? environment["USER"].flatMap { $0.isEmpty ? nil : $0 } ?? "guest"
        guard !name.contains("\n") else { throw UsageError("--nick must be one line") }
        return .client(host: host, port: port, nick: name)
    }
}

/// A command line that does not make sense; the message says why.
struct UsageError: Error {
    let message: String
    init(_ message: String) { self.message = message }
}
