import Dispatch
import SocketTLS

/// Accepts TCP connections for Swift concurrency: `connections` yields a `SocketConnection` for
/// each peer that connects.
///
/// Accepted connections wait in `connections` until taken. The listener stops (its socket closed,
/// the sequence ended) on `close()`, when it is released, and when the sequence ends because the
/// task iterating it was cancelled: nobody could take a connection after that, and accepting
/// connections only to drop them would tell clients a server is there.
public final class ConnectionListener: Sendable {
    /// Each accepted connection, in order of arrival; ends after `close()`.
    public let connections: AsyncStream<SocketConnection>
    /// The address bound; with port 0 it carries the port the OS chose.
    public let localAddress: SocketAddress

    private let listener: SocketListener
    private let queue: DispatchQueue
    private let continuation: AsyncStream<SocketConnection>.Continuation

    /// Binds and listens on `host:port` (see `SocketListener.init` for the parameters). With `tls`
    /// (a server context) every accepted connection speaks TLS; its handshake runs behind the
    /// connection, which yields plaintext once it completes.
    public init(
        host: String, port: Int, dualStack: Bool = false, backlog: Int32 = 1024, tls: TLSContext? = nil
    ) throws(SocketError) {
        let listener = try SocketListener(host: host, port: port, dualStack: dualStack, backlog: backlog)
        let queue = DispatchQueue(label: "SocketCore.ConnectionListener")
        self.queue = queue
        self.listener = listener
        localAddress = listener.localAddress
        (connections, continuation) = AsyncStream.makeStream(of: SocketConnection.self)
        continuation.onTermination = { _ in
            queue.async { listener.close() }
        }
        queue.async { [continuation] in
            listener.start(queue: queue) { socket in
                try? socket.setNoDelay()
                let session = tls?.makeServerSession(peerLabel: socket.label)
                continuation.yield(SocketConnection(socket: socket, tls: session))
            }
        }
    }

    /// The bound port.
    public var port: Int { localAddress.port }

    /// Stops accepting, closes the listening socket and ends `connections`.
    public func close() {
        // Ending the sequence runs `onTermination`, which closes the listener on its queue.
        continuation.finish()
    }

    deinit {
        close()
    }
}
