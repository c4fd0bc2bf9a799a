import CoreMetrics
import Dispatch
import Glibc
import SocketCore

/// The metrics port (`--metrics HOST:PORT`): a small HTTP/1.1 server on SocketCore that answers
/// each GET with one response and closes. `OperatorView` says what each path answers.
///
/// It shares nothing with the chat but the process: its own listener, its own serial queue
/// (`ChatServer.metrics`), its own read buffer, its own connection limit. So a slowloris or a
/// flood of scrapes against it costs the chat's queue nothing; the chat's queue is asked for a
/// snapshot at most once a second, whatever arrives here (`OperatorView`).
///
/// Every connection is bounded:
/// - at most `Limits.maxConnections` open at once; past that, a connection gets a 503 into its
///   empty send buffer and is closed on the accepting turn (no channel, no reading);
/// - its request head within `Limits.maxHeadBytes` (else 431) and `Limits.headTimeout` (else
///   closed: a slowloris is owed no answer);
/// - the whole connection within `Limits.lifetime`, so a client that never reads its response,
///   nor closes, is closed anyway.
///
/// Threading: `@unchecked Sendable` because its state is confined to its queue; `start` and
/// `close` may be called from any thread but that queue.
public final class MetricsEndpoint: @unchecked Sendable {
    /// The endpoint's bounds.
    public struct Limits: Sendable {
        /// Connections open at once.
        public var maxConnections = 16
        /// Bytes of a request's line and headers.
        public var maxHeadBytes = 8192
        /// Milliseconds from accepting a connection to the end of its request head.
        public var headTimeoutMillis: UInt64 = 5_000
        /// Milliseconds a connection may stay open in all.
        public var lifetimeMillis: UInt64 = 10_000

        /// The defaults: 16 connections, 8 KiB heads within 5 s, 10 s in all.
        public init() {}
    }

    /// The address the endpoint listens on (with port 0, the port the OS chose).
    public let localAddress: SocketAddress
    /// The bounds it keeps.
    public let limits: Limits

    private let queue = DispatchQueue(label: "ChatServer.metrics")
    private let listener: SocketListener
    /// Shared by every connection of the endpoint: a request head is small.
    private let readBuffer = ReadBuffer(capacity: 4096)
    private let handler: (HTTPRequestHead, @escaping @Sendable (HTTPResponse) -> Void) -> Void
    private var connections: [ObjectIdentifier: HTTPConnection] = [:]
    private var timer: DispatchSourceTimer?
    /// What the endpoint turns away, counted as it happens (rare by nature): `limit` (all
    /// `maxConnections` open), `timeout` (a head too slow, or the lifetime over), `bad_request`
    /// (not a GET, a head too long, not HTTP/1.x).
    private let overLimitCounter = Counter(label: "chat_metrics_http_rejections_total", dimensions: [("reason", "limit")])
    private let timedOutCounter = Counter(label: "chat_metrics_http_rejections_total", dimensions: [("reason", "timeout")])
    private let badRequestCounter = Counter(label: "chat_metrics_http_rejections_total", dimensions: [("reason", "bad_request")])
    private var closed = false

    /// Binds `host:port` (nothing is accepted until `start()`). `handler` runs on the endpoint's
    /// queue for every complete GET and calls its second argument once, from any thread, with
    /// the response.
    public init(
        host: String, port: Int, limits: Limits = Limits(),
        handler: @escaping (HTTPRequestHead, @escaping @Sendable (HTTPResponse) -> Void) -> Void
    ) throws(SocketError) {
        self.limits = limits
        self.handler = handler
        listener = try SocketListener(host: host, port: port, dualStack: host == "::", backlog: 128)
        localAddress = listener.localAddress
    }

    /// Starts accepting, and the timer that enforces the deadlines.
    public func start() {
        queue.sync {
            listener.start(queue: queue, handler: { [weak self] socket in self?.accept(socket) })
            timer = queue.startRepeatingTimer(every: .milliseconds(250)) { [weak self] in self?.sweep() }
        }
    }

    /// Stops accepting and closes every connection.
    public func close() {
        queue.sync {
            closed = true
            listener.close()
            timer?.cancel()
            timer = nil
            for connection in connections.values { connection.channel.close() }
        }
    }

    // MARK: Connections (the endpoint's queue)

    private func accept(_ socket: Socket) {
        guard !closed, connections.count < limits.maxConnections else {
            overLimitCounter.increment()
            // Into an empty send buffer, so it never blocks; the client may see a reset instead
            // if it had sent its request already, which is as good a refusal.
            let refusal = HTTPResponse(status: 503, text: "too many connections to the metrics port").encoded
            _ = refusal.withUnsafeBytes { try? socket.write($0) }
            socket.close()
            return
        }
        let now = Self.uptimeMillis()
        let channel = SocketChannel(socket: socket, queue: queue, readBuffer: readBuffer)
        let connection = HTTPConnection(
            channel: channel, reader: HTTPRequestHead.Reader(maxBytes: limits.maxHeadBytes),
            headDeadline: now + limits.headTimeoutMillis, closeDeadline: now + limits.lifetimeMillis)
        let key = ObjectIdentifier(connection)
        connections[key] = connection
        channel.onBytes = { [weak self, unowned connection] bytes in self?.received(bytes, on: connection) }
        channel.onEndOfInput = { [unowned connection] in
            // The client is done sending: once answered (or never to be), close.
            if connection.answered || connection.head == nil { connection.channel.close() }
        }
        channel.onClosed = { [weak self] _ in self?.connections[key] = nil }
        channel.start()
    }

    private func received(_ bytes: UnsafeRawBufferPointer, on connection: HTTPConnection) {
        guard connection.head == nil else { return }  // what follows the head is read and dropped
        switch connection.reader.append(bytes) {
        case .incomplete:
            return
        case .invalid(let status):
            connection.head = HTTPRequestHead(method: "", path: "")
            badRequestCounter.increment()
            respond(HTTPResponse(status: status, text: "bad request"), on: connection)
        case .complete(let head):
            connection.head = head
            guard head.method == "GET" else {
                    badRequestCounter.increment()
                return respond(HTTPResponse(status: 405, text: "only GET is served here"), on: connection)
            }
            handler(head) { [weak self] response in
                guard let self else { return }
                queue.async { self.respond(response, on: connection) }
            }
        }
    }

    /// Sends `response` and shuts down sending; the connection closes when the client does, or
    /// at its lifetime.
    private func respond(_ response: HTTPResponse, on connection: HTTPConnection) {
        guard !connection.answered, connection.channel.isOpen else { return }
        connection.answered = true
        connection.channel.enqueue(ByteChunk(response.encoded))
        connection.channel.flush()
        connection.channel.shutdownWrite()
        if connection.channel.inputEnded { connection.channel.close() }
    }

    /// Closes connections past their deadlines.
    private func sweep() {
        let now = Self.uptimeMillis()
        for connection in connections.values where connection.channel.isOpen {
            if now >= connection.closeDeadline || (connection.head == nil && now >= connection.headDeadline) {
                if !connection.answered {
                    timedOutCounter.increment()
                }
                connection.channel.close()
            }
        }
    }

    private static func uptimeMillis() -> UInt64 { DispatchTime.now().uptimeNanoseconds / 1_000_000 }
}

/// One connection of the metrics port. Used only on the endpoint's queue.
/// `@unchecked Sendable`: confined to the endpoint's queue; a handler's response crosses back to it there.
private final class HTTPConnection: @unchecked Sendable {
    let channel: SocketChannel
    var reader: HTTPRequestHead.Reader
    /// The request's head, once complete (an empty one for a refused request).
    var head: HTTPRequestHead?
    /// Whether its response is queued.
    var answered = false
    /// When (uptime milliseconds) the head must have arrived.
    let headDeadline: UInt64
    /// When (uptime milliseconds) the connection is closed whatever it does.
    let closeDeadline: UInt64

    init(channel: SocketChannel, reader: HTTPRequestHead.Reader, headDeadline: UInt64, closeDeadline: UInt64) {
        self.channel = channel
        self.reader = reader
        self.headDeadline = headDeadline
        self.closeDeadline = closeDeadline
    }
}
