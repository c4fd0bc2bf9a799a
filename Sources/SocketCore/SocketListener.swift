import Dispatch
import Glibc

/// A listening TCP socket that accepts connections on a Dispatch read source.
///
/// Ownership: the listener owns the listening descriptor and closes it after its read source is
/// cancelled. Each accepted `Socket` belongs to whoever receives it in the accept handler.
///
/// Threading: `start` and `close` must be called on the queue given to `start` (or before `start`);
/// the accept handler runs there.
public final class SocketListener: @unchecked Sendable {
    /// The address actually bound; with port 0 it carries the port the OS chose.
    public let localAddress: SocketAddress

    private let socket: Socket
    private var source: DispatchSourceRead?
    private var queue: DispatchQueue?
    private var handler: ((Socket) -> Void)?
    private var onError: ((SocketError) -> Void)?
    private var paused = false
    private var closed = false

    /// Binds and listens on `host:port`.
    ///
    /// - Parameters:
    ///   - host: a name or numeric address; `"::"` with `dualStack` accepts IPv4 and IPv6 on one socket.
    ///   - port: the port, or 0 to let the OS choose (read it back from `port`).
    ///   - dualStack: for an IPv6 address, accept IPv4-mapped connections as well (`IPV6_V6ONLY` off).
    ///   - backlog: the kernel's queue of not yet accepted connections.
    public init(host: String, port: Int, dualStack: Bool = false, backlog: Int32 = 1024) throws(SocketError) {
        let addresses = try Resolver.resolve(host: host, port: port, passive: true)
        var lastError: SocketError?
        for address in addresses {
            do throws(SocketError) {
                let socket = try Socket(family: address.family, label: address.description)
                do throws(SocketError) {
                    try socket.setOption(level: SOL_SOCKET, name: SO_REUSEADDR, value: 1, "SO_REUSEADDR")
                    if address.family == AF_INET6 {
                        try socket.setOption(
                            level: Int32(IPPROTO_IPV6), name: IPV6_V6ONLY, value: dualStack ? 0 : 1, "IPV6_V6ONLY")
                    }
                    try socket.bind(to: address)
                    try socket.listen(backlog: backlog)
                    let bound = try socket.localAddress()
                    socket.label = bound.description
                    self.socket = socket
                    self.localAddress = bound
                    return
                } catch {
                    socket.close()
                    throw error
                }
            } catch {
                lastError = error
            }
        }
        throw lastError!
    }

    /// The bound port.
    public var port: Int { localAddress.port }

    /// Starts accepting. `handler` receives every accepted socket (non-blocking, close-on-exec);
    /// `onError` hears of failures that do not stop the listener, such as running out of descriptors.
    public func start(
        queue: DispatchQueue, handler: @escaping (Socket) -> Void, onError: @escaping (SocketError) -> Void = { _ in }
    ) {
        precondition(source == nil && !closed, "start() called twice")
        self.queue = queue
        self.handler = handler
        self.onError = onError
        let source = DispatchSource.makeReadSource(fileDescriptor: socket.descriptor, queue: queue)
        source.setEventHandler { [self] in acceptPending() }
        source.setCancelHandler { [socket] in socket.close() }
        self.source = source
        source.activate()
    }

    /// Accepts until the kernel's queue is empty (`EAGAIN`), at most 64 per turn: a flood of
    /// connections must not keep the queue from the connections already open. The rest wait for
    /// the next turn, through the queue (the source may not fire again for them).
    private func acceptPending() {
        guard let queue, let handler, let onError else { return }
        for _ in 0..<64 {
            guard !closed, !paused else { return }
            do {
                guard let accepted = try socket.accept() else { return }
                handler(accepted)
            } catch {
                switch error.errno {
                case ECONNABORTED, EPROTO, EPERM:
                    // The connection died in the queue; the next one may be fine.
                    continue
                case EMFILE, ENFILE, ENOBUFS, ENOMEM:
                    // Out of descriptors or memory: the pending connection stays readable, so keep
                    // going would spin. Back off, then try again.
                    onError(error)
                    pause(for: .milliseconds(100), queue: queue)
                    return
                default:
                    onError(error)
                    return
                }
            }
        }
        queue.async { [self] in acceptPending() }
    }

    private func pause(for delay: DispatchTimeInterval, queue: DispatchQueue) {
        guard let source, !paused else { return }
        paused = true
        source.suspend()
        queue.asyncAfter(deadline: .now() + delay) { [self] in
            guard paused, let source = self.source else { return }
            paused = false
            source.resume()
        }
    }

    /// Stops accepting and closes the listening descriptor (after its source is cancelled).
    public func close() {
        guard !closed else { return }
        closed = true
        guard let source else {
            socket.close()
            return
        }
        if paused {
            paused = false
            source.resume()
        }
        source.cancel()
        // The handlers may hold their owner, which may hold the listener.
        handler = nil
        onError = nil
    }
}
