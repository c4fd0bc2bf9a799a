import ChatProtocol
import SocketCore
import SocketTLS

/// A ChatProtocol session over TCP for Swift concurrency: connect, handshake, then frames both ways.
///
/// Shared by the terminal client and the load tester. Frames are encoded into one buffer per call
/// to `send`, so a batch of frames leaves in one write; incoming bytes are decoded incrementally.
/// `send` suspends while the server is not keeping up (the socket layer's backpressure).
public final class ChatConnection: Sendable {
    /// What the server said when it accepted the handshake.
    public struct Welcome: Sendable, Equatable {
        /// The protocol version the server speaks.
        public let version: UInt16
        /// The nick the server registered for us.
        public let nick: String
        /// The largest frame the server accepts.
        public let maxFrameSize: Int
        /// The server's message of the day (may be empty).
        public let motd: String
    }

    /// Why a handshake did not end in a welcome.
    public enum HandshakeError: Error, Sendable, Equatable, CustomStringConvertible {
        /// The server refused, with its error code and reason.
        case refused(ErrorCode, String)
        /// The server closed the connection before answering.
        case closedBeforeWelcome
        /// The server answered with something other than a welcome or an error.
        case unexpected(FrameType)
        /// The server accepted the connection but did not answer the hello in time.
        case timedOut(Duration)

        /// What to tell the user, e.g. `server refused: nick taken (nickTaken)`.
        public var description: String {
            switch self {
            case .refused(let code, let reason): return "server refused: \(reason) (\(code))"
            case .closedBeforeWelcome: return "server closed the connection during the handshake"
            case .unexpected(let type): return "server sent \(type) instead of a welcome"
            case .timedOut(let limit): return "server did not answer the hello within \(limit.components.seconds) s"
            }
        }
    }

    /// The server's answer to our hello.
    public let welcome: Welcome
    /// Frames from the server after the welcome, in order; ends when the server closes, throws on a
    /// socket error or an undecodable stream (`FrameError`). Iterate from one task.
    public let frames: IncomingFrames

    private let connection: SocketConnection

    /// Connects to `host:port` and performs the handshake as `nick`, asking for protocol
    /// `version` (1 by default, which every server speaks; the terminal client asks for 2).
    ///
    /// `timeout` bounds the TCP connect, `handshakeTimeout` the wait for the server's answer, so
    /// a server that accepts and says nothing cannot hang the caller. Throws `SocketError` when
    /// the connection fails (`.tls(TLSError)` when the TLS handshake does), `HandshakeError` when
    /// the server refuses or does not answer.
    ///
    /// With `tls` (a client context) the connection speaks TLS and verifies the server's
    /// certificate against `host`; the TLS handshake counts against `handshakeTimeout` too.
    public static func connect(
        host: String, port: Int, nick: String, password: String? = nil, version: UInt16 = 1,
        timeout: Duration = .seconds(10), handshakeTimeout: Duration = .seconds(10), tls: TLSContext? = nil,
        login: AccountLogin? = nil
    ) async throws -> ChatConnection {
        let connection = try await SocketConnection.connect(host: host, port: port, timeout: timeout, tls: tls)
        let deadline = ContinuousClock.now + handshakeTimeout
        // Closing the connection at the deadline ends the read below; the clock tells why.
        let watchdog = Task {
            try await Task.sleep(until: deadline)
            connection.close()
        }
        defer { watchdog.cancel() }
        do {
            var hello: [UInt8] = []
            FrameEncoder.encode(.hello(version: version, nick: nick, password: password), into: &hello)
            // Version 3: the login rides right behind the hello, so a reserved nick is welcomed
            // (docs/PROTOCOL.md, "Version 3"); an older server skips it as an unknown frame.
            if let login, version >= 3 {
                FrameEncoder.encode(.login(account: login.name, password: login.password), into: &hello)
            }
            try await connection.write(hello)
            var reader = FrameStream(connection: connection)
            let first: Frame?
            do {
                first = try await reader.next()
            } catch where ContinuousClock.now >= deadline {
                throw HandshakeError.timedOut(handshakeTimeout)
            }
            guard let first else {
                throw ContinuousClock.now >= deadline ? HandshakeError.timedOut(handshakeTimeout) : HandshakeError.closedBeforeWelcome
            }
            switch first {
            case .welcome(let version, let nick, let maxFrameSize, let motd):
                let welcome = Welcome(version: version, nick: nick, maxFrameSize: Int(maxFrameSize), motd: motd)
                return ChatConnection(connection: connection, welcome: welcome, reader: reader)
            case .error(let code, _, _, let reason):
                throw HandshakeError.refused(code, reason)
            default:
                throw HandshakeError.unexpected(first.type)
            }
        } catch {
            connection.close()
            throw error
        }
    }

    private init(connection: SocketConnection, welcome: Welcome, reader: FrameStream) {
        self.connection = connection
        self.welcome = welcome
        self.frames = IncomingFrames(reader: reader)
    }

    /// What the connection negotiated, `TLS 1.3, TLS_AES_128_GCM_SHA256`, or nil for plain text.
    public var tlsParameters: String? {
        get async { await connection.tlsParameters }
    }

    /// The server's certificate and, for a client that verifies nothing, what verification would
    /// have said about it; nil for plain text.
    public var tlsPeer: (certificate: TLSCertificateSummary?, ignoredFailure: TLSError?)? {
        get async { await connection.tlsPeer }
    }

    /// Sends one frame.
    public func send(_ frame: Frame) async throws {
        var bytes: [UInt8] = []
        FrameEncoder.encode(frame, into: &bytes)
        try await connection.write(bytes)
    }

    /// Sends several frames in one write.
    public func send(_ frames: [Frame]) async throws {
        var bytes: [UInt8] = []
        for frame in frames { FrameEncoder.encode(frame, into: &bytes) }
        try await connection.write(bytes)
    }

    /// Sends bytes that already hold whole encoded frames (for senders that encode in bulk).
    public func send(encoded bytes: [UInt8]) async throws {
        try await connection.write(bytes)
    }

    /// Closes the connection; `frames` then ends. To leave politely, send `.goodbye(reason:)` first.
    public func close() {
        connection.close()
    }
}

/// The frames arriving on a `ChatConnection`.
public struct IncomingFrames: AsyncSequence, Sendable {
    /// One decoded frame from the server.
    public typealias Element = Frame
    fileprivate let reader: FrameStream

    /// Iterates `IncomingFrames`.
    public struct AsyncIterator: AsyncIteratorProtocol {
        fileprivate var reader: FrameStream

        /// The next frame, or `nil` when the server closed the connection.
        public mutating func next() async throws -> Frame? {
            try await reader.next()
        }
    }

    /// Returns the iterator; use one at a time.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(reader: reader)
    }
}

/// Decodes frames from a connection's inbound bytes.
private struct FrameStream: @unchecked Sendable {
    // The iterator is a value whose only reference-typed part is the connection core, which is
    // confined to its queue; the decoder is copied with the stream and used by one task at a time.
    private var bytes: InboundBytes.AsyncIterator
    private var decoder = FrameDecoder(maxFrameSize: WireProtocol.maxFrameSize)

    init(connection: SocketConnection) {
        bytes = connection.inbound.makeAsyncIterator()
    }

    mutating func next() async throws -> Frame? {
        while true {
            if let frame = try decoder.next() { return frame }
            guard let chunk = try await bytes.next() else {
                if decoder.bufferedByteCount > 0 { throw FrameError.truncated(.length) }
                return nil
            }
            decoder.append(contentsOf: chunk)
        }
    }
}
