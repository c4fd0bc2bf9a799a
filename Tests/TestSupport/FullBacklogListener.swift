import Glibc
import SocketCore

/// A loopback port where a connect neither succeeds nor fails: a listening socket that never
/// accepts, whose accept queue is already full.
///
/// Linux drops the SYN of a connection that would overflow a listener's accept queue, and the
/// connecting side keeps retrying for about two minutes, so a connect to `port` stays in progress
/// until its caller gives up, never leaving the machine. That is what tests of giving up (timeouts,
/// cancellation, closing a stream while it connects) need: a connect that is certainly still under
/// way. The listener is made with a backlog of 0 and filled with a connection that is never accepted.
///
/// Ownership: owns the listening socket and the filler connections; `close()` closes them all.
public final class FullBacklogListener: @unchecked Sendable {
    /// The port whose connects hang.
    public let port: Int
    private let listener: Socket
    private var fillers: [Socket] = []

    /// Listens on 127.0.0.1 with an OS-chosen port and fills the accept queue.
    public init() throws {
        let listener = try Socket(family: AF_INET, label: "full-backlog listener")
        do {
            try listener.bind(to: SocketAddress(ip: "127.0.0.1", port: 0)!)
            try listener.listen(backlog: 0)
            port = try listener.localAddress().port
        } catch {
            listener.close()
            throw error
        }
        self.listener = listener
        do {
            try fill()
        } catch {
            close()
            throw error
        }
    }

    private func fill() throws {
        let target = SocketAddress(ip: "127.0.0.1", port: port)!
        // Connect fillers until the listener's queue is over its backlog, which the kernel reports
        // for a listening socket in TCP_INFO: `tcpi_unacked` connections waiting, `tcpi_sacked`
        // the backlog. A filler's connect completes at once on loopback (the wait below is a bound).
        while !isFull {
            guard fillers.count < 16 else {
                throw SocketError(.posix(EAGAIN), operation: "fill the accept queue of", target: target.description)
            }
            let socket = try Socket(family: AF_INET, label: "filler")
            fillers.append(socket)
            if case .wouldBlock = try socket.connect(to: target) {
                var descriptor = pollfd(fd: socket.descriptor, events: Int16(POLLOUT), revents: 0)
                _ = poll(&descriptor, 1, 10_000)
            }
        }
    }

    /// Whether the listener's accept queue holds more connections than its backlog allows.
    private var isFull: Bool {
        var info = tcp_info()
        var length = socklen_t(MemoryLayout<tcp_info>.size)
        guard getsockopt(listener.descriptor, Int32(IPPROTO_TCP), TCP_INFO, &info, &length) == 0 else { return false }
        return info.tcpi_unacked > info.tcpi_sacked
    }

    /// Closes the listener and the filler connections.
    public func close() {
        for socket in fillers { socket.close() }
        fillers = []
        listener.close()
    }
}
