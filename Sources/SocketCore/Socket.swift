import CSocketShims
import Glibc

/// Owns one non-blocking, close-on-exec TCP socket descriptor and closes it exactly once.
///
/// `Socket` does no locking: its owner (a `SocketChannel`, a `SocketListener`, a stream pair) keeps it
/// on one queue or thread at a time. When Dispatch sources watch the descriptor, the owner calls
/// `close()` only after every source's cancel handler has run, so no source ever sees a reused
/// descriptor number.
///
/// Every owner must `close()` its socket. Dropping an open one is a bug, and in debug builds
/// `deinit` traps on it (as swift-nio's `BaseSocket` does), so that the leak is found where it
/// happens instead of hidden; release builds close the descriptor and carry on.
///
/// The socket never changes a process-wide setting: sends pass `MSG_NOSIGNAL` instead of relying on
/// `SIGPIPE` being ignored, so a program's signal dispositions stay its own.
public final class Socket: @unchecked Sendable {
    /// The descriptor, or `-1` once closed.
    public private(set) var descriptor: Int32
    /// A name for error messages: the address connected to or bound, when known.
    public var label: String

    /// Takes ownership of `descriptor`, which must be an open stream socket.
    public init(takingOwnershipOf descriptor: Int32, label: String = "") {
        self.descriptor = descriptor
        self.label = label
    }

    /// Creates an unconnected non-blocking TCP socket of `family` (`AF_INET` or `AF_INET6`).
    public convenience init(family: Int32, label: String = "") throws(SocketError) {
        let type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        let fd = try retryingInterrupts("socket", target: label) { Glibc.socket(family, type, 0) }
        self.init(takingOwnershipOf: fd, label: label)
    }

    deinit {
        assert(descriptor < 0, "Socket \(descriptor) (\(label)) dropped without close(): its owner leaked it")
        if descriptor >= 0 { Glibc.close(descriptor) }
    }

    /// Whether `close()` has run.
    public var isClosed: Bool { descriptor < 0 }

    /// Closes the descriptor. Calling it again does nothing.
    ///
    /// `close(2)` is not retried on `EINTR`: on Linux the descriptor is released either way, and a
    /// retry could close a number another thread has just been given.
    public func close() {
        guard descriptor >= 0 else { return }
        Glibc.close(descriptor)
        descriptor = -1
    }

    // MARK: Options

    /// Sets an integer socket option.
    public func setOption(level: Int32, name: Int32, value: Int32, _ what: String) throws(SocketError) {
        var value = value
        _ = try retryingInterrupts("setsockopt \(what)", target: label) {
            setsockopt(descriptor, level, name, &value, socklen_t(MemoryLayout<Int32>.size))
        }
    }

    /// Reads an integer socket option.
    public func option(level: Int32, name: Int32, _ what: String) throws(SocketError) -> Int32 {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        _ = try retryingInterrupts("getsockopt \(what)", target: label) {
            getsockopt(descriptor, level, name, &value, &length)
        }
        return value
    }

    /// Disables Nagle's algorithm: chat lines are small and must leave at once.
    public func setNoDelay() throws(SocketError) {
        try setOption(level: Int32(IPPROTO_TCP), name: TCP_NODELAY, value: 1, "TCP_NODELAY")
    }

    // MARK: Addresses

    /// The local address the socket is bound to.
    public func localAddress() throws(SocketError) -> SocketAddress {
        try address("getsockname") { getsockname(descriptor, $0, $1) }
    }

    /// The address of the connected peer.
    public func remoteAddress() throws(SocketError) -> SocketAddress {
        try address("getpeername") { getpeername(descriptor, $0, $1) }
    }

    private func address(
        _ call: String, _ body: (UnsafeMutablePointer<sockaddr>, UnsafeMutablePointer<socklen_t>) -> Int32
    ) throws(SocketError) -> SocketAddress {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        return try withUnsafeMutablePointer(to: &storage) { pointer throws(SocketError) in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address throws(SocketError) in
                _ = try retryingInterrupts(call, target: label) { body(address, &length) }
                return SocketAddress(address, length: length)
            }
        }
    }

    // MARK: Connection set-up

    /// Binds to `address`.
    public func bind(to address: SocketAddress) throws(SocketError) {
        _ = try address.withSockaddr { pointer, length throws(SocketError) in
            try retryingInterrupts("bind", target: address.description) { Glibc.bind(descriptor, pointer, length) }
        }
    }

    /// Starts listening with the given backlog.
    public func listen(backlog: Int32) throws(SocketError) {
        _ = try retryingInterrupts("listen", target: label) { Glibc.listen(descriptor, backlog) }
    }

    /// Starts a non-blocking connect: `.done` when connected at once (common on loopback),
    /// `.wouldBlock` while in progress — wait for writability, then check `pendingError()`.
    public func connect(to address: SocketAddress) throws(SocketError) -> IOResult<Void> {
        let result = address.withSockaddr { pointer, length in Glibc.connect(descriptor, pointer, length) }
        if result == 0 { return .done(()) }
        switch errno {
        case EINPROGRESS, EINTR:
            // After EINTR the connect carries on in the background, exactly like EINPROGRESS.
            return .wouldBlock
        case let code:
            throw SocketError(.posix(code), operation: "connect", target: label.isEmpty ? address.description : label)
        }
    }

    /// The error of a finished non-blocking connect (`SO_ERROR`), `0` on success.
    public func pendingError() throws(SocketError) -> Int32 {
        try option(level: SOL_SOCKET, name: SO_ERROR, "SO_ERROR")
    }

    /// Accepts one pending connection as a non-blocking, close-on-exec socket; `nil` when none is
    /// pending. Both flags are set by `accept4` itself, so a process forked meanwhile by another
    /// thread never inherits the new descriptor.
    public func accept() throws(SocketError) -> Socket? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let flags = Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        let result = try withUnsafeMutablePointer(to: &storage) { pointer throws(SocketError) in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address throws(SocketError) in
                try retryingInterruptsNonBlocking("accept", target: label) {
                    socketstreams_accept4(descriptor, address, &length, flags)
                }
            }
        }
        guard case .done(let fd) = result else { return nil }
        let peer = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { SocketAddress($0, length: length) }
        }
        return Socket(takingOwnershipOf: fd, label: peer.description)
    }

    // MARK: Data

    /// Reads into `buffer`: `.done(0)` at end of stream, `.wouldBlock` when nothing is there yet.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(SocketError) -> IOResult<Int> {
        try retryingInterruptsNonBlocking("recv from", target: label) {
            recv(descriptor, buffer.baseAddress, buffer.count, 0)
        }
    }

    /// Sends what the kernel accepts of `bytes` without blocking; never raises `SIGPIPE`.
    public func write(_ bytes: UnsafeRawBufferPointer) throws(SocketError) -> IOResult<Int> {
        try retryingInterruptsNonBlocking("send to", target: label) {
            send(descriptor, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL))
        }
    }

    /// Sends several buffers in one system call (a gather write); never raises `SIGPIPE`.
    public func write(vectors: UnsafeMutableBufferPointer<iovec>) throws(SocketError) -> IOResult<Int> {
        var message = msghdr()
        message.msg_iov = vectors.baseAddress
        message.msg_iovlen = vectors.count
        return try retryingInterruptsNonBlocking("send to", target: label) {
            sendmsg(descriptor, &message, Int32(MSG_NOSIGNAL))
        }
    }

    /// Shuts down the sending direction (the peer reads end of stream) and keeps receiving.
    public func shutdownWrite() throws(SocketError) {
        _ = try retryingInterrupts("shutdown", target: label) { Glibc.shutdown(descriptor, Int32(SHUT_WR)) }
    }
}
