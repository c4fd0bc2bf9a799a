/// The start of an HTTP/1.x request, as far as the metrics port needs it: the method and the
/// path. Bytes go in as they arrive; the head is complete at the empty line after the headers.
///
/// Bounded on purpose: the metrics port is reachable by whoever can reach it, so a head longer
/// than `maxBytes` is refused (431) rather than buffered, and nothing past the head is kept
/// (a GET has no body). A value type without I/O, tested byte by byte (`HTTPRequestHeadTests`).
public struct HTTPRequestHead: Sendable, Equatable {
    /// The request method, e.g. `GET`.
    public var method: String
    /// The request target without its query, e.g. `/metrics`.
    public var path: String

    /// A head with `method` and `path`.
    public init(method: String, path: String) {
        self.method = method
        self.path = path
    }

    /// What the bytes so far amount to.
    public enum Outcome: Sendable, Equatable {
        /// The head is not complete yet.
        case incomplete
        /// The head is complete.
        case complete(HTTPRequestHead)
        /// The bytes cannot be a request this port serves; answer with `status` and close.
        case invalid(status: Int)
    }

    /// Collects a request head from its bytes.
    public struct Reader: Sendable {
        /// The most bytes a head may take, request line and headers together.
        public let maxBytes: Int
        private var bytes: [UInt8] = []
        private var outcome = Outcome.incomplete

        /// A reader refusing heads longer than `maxBytes`.
        public init(maxBytes: Int = 8192) { self.maxBytes = maxBytes }

        /// Takes the next bytes; once complete or invalid, later bytes change nothing.
        public mutating func append(_ chunk: UnsafeRawBufferPointer) -> Outcome {
            guard case .incomplete = outcome else { return outcome }
            let start = max(0, bytes.count - 3)
            bytes.append(contentsOf: chunk.prefix(maxBytes + 4 - bytes.count))
            if let end = Self.endOfHead(in: bytes, from: start) {
                outcome = Self.parse(bytes[..<end])
                bytes = []
            } else if bytes.count > maxBytes {
                outcome = .invalid(status: 431)
                bytes = []
            }
            return outcome
        }

        /// Where the empty line after the headers starts, searching from `start`; accepts bare
        /// LF line ends, as RFC 9112 lets a server.
        private static func endOfHead(in bytes: [UInt8], from start: Int) -> Int? {
            var index = start
            while index < bytes.count {
                if bytes[index] == 0x0A {
                    if index + 1 < bytes.count, bytes[index + 1] == 0x0A { return index }
                    if index + 2 < bytes.count, bytes[index + 1] == 0x0D, bytes[index + 2] == 0x0A { return index }
                }
                index += 1
            }
            return nil
        }

        private static func parse(_ head: ArraySlice<UInt8>) -> Outcome {
            let line = head.prefix { $0 != 0x0D && $0 != 0x0A }
            let parts = line.split(separator: 0x20, omittingEmptySubsequences: false)
            guard parts.count == 3, let version = String(validating: parts[2], as: UTF8.self),
                version.hasPrefix("HTTP/1."),
                let method = String(validating: parts[0], as: UTF8.self), !method.isEmpty,
                let target = String(validating: parts[1], as: UTF8.self), target.hasPrefix("/")
            else { return .invalid(status: 400) }
            let path = String(target.prefix { $0 != "?" })
            return .complete(HTTPRequestHead(method: method, path: path))
        }
    }
}

/// A response of the metrics port: always complete, always followed by closing the connection.
public struct HTTPResponse: Sendable, Equatable {
    /// The status code.
    public var status: Int
    /// The `Content-Type` header.
    public var contentType: String
    /// The body.
    public var body: [UInt8]

    /// A response with `body`.
    public init(status: Int, contentType: String = "text/plain; charset=utf-8", body: [UInt8]) {
        self.status = status
        self.contentType = contentType
        self.body = body
    }

    /// A plain-text response whose body is `text` and a line end.
    public init(status: Int, text: String) {
        self.init(status: status, body: Array((text + "\n").utf8))
    }

    /// The status line, headers and body, as sent.
    public var encoded: [UInt8] {
        var head = "HTTP/1.1 \(status) \(Self.reason(status))\r\n"
        head += "Content-Type: \(contentType)\r\nContent-Length: \(body.count)\r\nConnection: close\r\n"
        if status == 405 { head += "Allow: GET\r\n" }
        head += "\r\n"
        return Array(head.utf8) + body
    }

    private static func reason(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 400: "Bad Request"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 408: "Request Timeout"
        case 431: "Request Header Fields Too Large"
        case 503: "Service Unavailable"
        default: "Error"
        }
    }
}
