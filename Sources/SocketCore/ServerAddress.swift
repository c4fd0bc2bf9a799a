/// A server to connect to, by name: a host name or IP address and a TCP port, as a user writes
/// it after `--server` (`127.0.0.1:7000`, `chat.example.org:7000`, `[::1]:7000`). Unlike a
/// `SocketAddress` it is not resolved; the connect resolves it. `chat-client` and
/// `chat-loadtest` parse their `--server`s with it.
public struct ServerAddress: Sendable, Hashable, CustomStringConvertible {
    /// A host name or an IPv4 or IPv6 address (IPv6 without brackets).
    public var host: String
    /// A TCP port (1–65535 when parsed; `init(host:port:)` takes what it is given).
    public var port: Int

    /// What is wrong with a `HOST:PORT` that did not parse.
    public enum ParseError: Error, Sendable, Equatable, CustomStringConvertible {
        /// No `:PORT` at the end, or nothing before it.
        case notHostAndPort
        /// An IPv6 address written without brackets, so its colons are ambiguous.
        case unbracketedIPv6
        /// The port is not a number from 1 to 65535.
        case badPort(String)

        /// The explanation to show after the address, with an example of the right form.
        public var description: String {
            switch self {
            case .notHostAndPort: "expected HOST:PORT, such as 127.0.0.1:7000 or [::1]:7000"
            case .unbracketedIPv6: "an IPv6 address goes in brackets, such as [::1]:7000"
            case .badPort(let port): "the port \"\(port)\" is not a number from 1 to 65535"
            }
        }
    }

    /// An address from its parts.
    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// Parses `HOST:PORT` or `[IPV6]:PORT`.
    public init(parsing text: String) throws(ParseError) {
        let hostPart: Substring
        let portPart: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else { throw .notHostAndPort }
            hostPart = text[text.index(after: text.startIndex)..<close]
            portPart = text[text.index(close, offsetBy: 2)...]
        } else {
            guard let colon = text.lastIndex(of: ":") else { throw .notHostAndPort }
            hostPart = text[..<colon]
            portPart = text[text.index(after: colon)...]
            if hostPart.contains(":") { throw .unbracketedIPv6 }
        }
        guard !hostPart.isEmpty, !hostPart.contains(where: \.isWhitespace) else { throw .notHostAndPort }
        // Int("+7000") parses, and a port is written with digits only.
        guard portPart.allSatisfy(\.isASCII), portPart.allSatisfy(\.isNumber), let port = Int(portPart), (1...65_535).contains(port) else {
            throw .badPort(String(portPart))
        }
        self.init(host: String(hostPart), port: port)
    }

    /// `HOST:PORT`, with an IPv6 host in brackets.
    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}
