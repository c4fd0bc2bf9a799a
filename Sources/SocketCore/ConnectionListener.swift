import Dispatch

/// Accepts TCP connections for Swift concurrency: `connections` yields a `SocketConnection` for
/// each peer that connects.
///
/// Accepted connections wait in `connections` until taken; a server that stops taking them should
/// `close()` the listener, which ends the sequence.
public final class ConnectionListener: Sendable {
    /// Each accepted connection, in order of arrival; ends after `close()`.
    public let connections: AsyncStream<SocketConnection>
    /// The address bound; with port 0 it carries the port the OS chose.
    public let localAddress: SocketAddress

    private let listener: SocketListener
    private let queue = DispatchQueue(label: "SocketStreams.ConnectionListener")
    private let continuation: AsyncStream<SocketConnection>.Continuation

    /// Binds and listens on `host:port` (see `SocketListener.init` for the parameters).
    public init(host: String, port: Int, dualStack: Bool = false, backlog: Int32 = 1024) throws(SocketError) {
        listener = try SocketListener(host: host, port: port, dualStack: dualStack, backlog: backlog)
        localAddress = listener.localAddress
        (connections, continuation) = AsyncStream.makeStream(of: SocketConnection.self)
        queue.async { [listener, continuation] in
            listener.start(queue: self.queue) { socket in
                try? socket.setNoDelay()
                continuation.yield(SocketConnection(socket: socket))
            }
        }
    }

    /// The bound port.
    public var port: Int { localAddress.port }

    /// Stops accepting, closes the listening socket and ends `connections`.
    public func close() {
        queue.async { [listener, continuation] in
            listener.close()
            continuation.finish()
        }
    }
}
