import Dispatch
import Glibc

/// A TCP connection for Swift concurrency: incoming bytes as an `AsyncSequence`, writes that
/// suspend while the peer is not keeping up.
///
/// Buffering is bounded in both directions. Incoming bytes that nobody consumes stop the channel
/// reading once `inboundLimit` bytes wait (the kernel then pushes back on the peer). A `write`
/// queues its bytes and, when more than `outboundLimit` bytes are still waiting for the kernel,
/// suspends until they have left; so at most `outboundLimit` plus one write is ever buffered.
///
/// Errors are `SocketError`s, or `CancellationError` when the waiting task is cancelled.
/// The connection owns its socket; `close()` (or the peer going away) releases it.
public final class SocketConnection: Sendable {
    /// The bytes arriving from the peer, in chunks, until the peer shuts down its side; iterate it
    /// from one task at a time.
    public let inbound: InboundBytes
    /// Who the peer is, for messages.
    public let label: String

    private let core: ConnectionCore

    /// Connects to `host:port` (trying each resolved address in turn within `timeout`).
    public static func connect(
        host: String, port: Int, timeout: Duration = .seconds(10),
        inboundLimit: Int = 256 * 1024, outboundLimit: Int = 256 * 1024
    ) async throws(SocketError) -> SocketConnection {
        let socket = try await SocketConnector.connect(host: host, port: port, timeout: timeout)
        return SocketConnection(socket: socket, inboundLimit: inboundLimit, outboundLimit: outboundLimit)
    }

    /// Takes over a connected socket (for example one accepted by `SocketListener`).
    public init(socket: Socket, on ioQueue: IOQueue = .next(), inboundLimit: Int = 256 * 1024, outboundLimit: Int = 256 * 1024) {
        label = socket.label
        core = ConnectionCore(
            channel: SocketChannel(socket: socket, queue: ioQueue.queue, readBuffer: ioQueue.readBuffer),
            inboundLimit: inboundLimit, outboundLimit: outboundLimit)
        inbound = InboundBytes(core: core)
        ioQueue.queue.async { [core] in core.start() }
    }

    /// Sends `bytes`, suspending while more than `outboundLimit` bytes wait for the peer.
    public func write(_ bytes: some Collection<UInt8>) async throws {
        try await write(ByteChunk(bytes))
    }

    /// Sends `chunk` without copying it, suspending while more than `outboundLimit` bytes wait for the peer.
    public func write(_ chunk: ByteChunk) async throws {
        try await core.write(chunk)
    }

    /// Shuts down the sending side once everything written has left; `inbound` keeps delivering.
    public func shutdownWrite() {
        core.queue.async { [core] in core.channel.shutdownWrite() }
    }

    /// Closes the connection; pending reads end and pending writes fail.
    public func close() {
        core.queue.async { [core] in core.channel.close() }
    }

    deinit {
        // Without this the channel's sources would keep the socket open for as long as the peer does.
        close()
    }
}

/// The incoming bytes of a `SocketConnection`: each element is the data that arrived since the
/// previous one (at least one byte); the sequence ends when the peer shuts down its side and throws
/// the `SocketError` that broke the connection, if one did.
public struct InboundBytes: AsyncSequence, Sendable {
    /// A chunk of bytes as it arrived: never empty.
    public typealias Element = [UInt8]
    fileprivate let core: ConnectionCore

    /// Iterates `InboundBytes`.
    public struct AsyncIterator: AsyncIteratorProtocol {
        fileprivate let core: ConnectionCore

        /// The next bytes, or `nil` at end of stream.
        public mutating func next() async throws -> [UInt8]? {
            try await core.read()
        }
    }

    /// Returns the iterator; only one should be active at a time.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(core: core)
    }
}

/// The state behind a `SocketConnection`, confined to the channel's queue (`queue`).
private final class ConnectionCore: @unchecked Sendable {
    let channel: SocketChannel
    var queue: DispatchQueue { channel.queue }
    private let inboundLimit: Int
    private let outboundLimit: Int

    private var inbound: [UInt8] = []
    private var inboundEnded = false
    private var failure: SocketError?
    private var closed = false
    private var reader: Waiter<[UInt8]?>?
    private var writers: [Waiter<Void>] = []

    init(channel: SocketChannel, inboundLimit: Int, outboundLimit: Int) {
        self.channel = channel
        self.inboundLimit = inboundLimit
        self.outboundLimit = outboundLimit
    }

    /// Hooks the channel up; on `queue`.
    func start() {
        channel.onBytes = { [self] bytes in received(bytes) }
        channel.onEndOfInput = { [self] in
            inboundEnded = true
            wakeReader()
        }
        channel.onDrained = { [self] in wakeWriters() }
        channel.onClosed = { [self] error in
            closed = true
            failure = failure ?? error
            inboundEnded = true
            wakeReader()
            wakeWriters()
        }
        channel.start()
    }

    private func received(_ bytes: UnsafeRawBufferPointer) {
        inbound.append(contentsOf: bytes)
        if inbound.count >= inboundLimit { channel.pauseReading() }
        wakeReader()
    }

    private func wakeReader() {
        guard let waiting = reader, let result = takeInbound() else { return }
        reader = nil
        waiting.resume(with: result)
    }

    /// What a read returns now, or `nil` when it has to wait.
    private func takeInbound() -> Result<[UInt8]?, Error>? {
        if !inbound.isEmpty {
            let bytes = inbound
            inbound = []
            channel.resumeReading()
            return .success(bytes)
        }
        if let failure { return .failure(failure) }
        if inboundEnded { return .success(nil) }
        return nil
    }

    func read() async throws -> [UInt8]? {
        let waiter = Waiter<[UInt8]?>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                queue.async { [self] in
                    guard !waiter.cancelled else {
                        continuation.resume(throwing: CancellationError())
                        return
                    }
                    precondition(reader == nil, "InboundBytes iterated from two tasks at once")
                    if let result = takeInbound() {
                        continuation.resume(with: result)
                    } else {
                        waiter.continuation = continuation
                        reader = waiter
                    }
                }
            }
        } onCancel: {
            queue.async { [self] in
                waiter.cancelled = true
                guard reader === waiter else { return }
                reader = nil
                waiter.resume(with: .failure(CancellationError()))
            }
        }
    }

    func write(_ chunk: ByteChunk) async throws {
        let waiter = Waiter<Void>()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
                queue.async { [self] in
                    guard !waiter.cancelled else {
                        continuation.resume(throwing: CancellationError())
                        return
                    }
                    if closed || !channel.isOpen {
                        continuation.resume(throwing: failure ?? SocketError(.posix(EPIPE), operation: "send to", target: channel.label))
                        return
                    }
                    channel.write(chunk)
                    // Wait while too much is queued, or, if this write failed, until onClosed (which runs
                    // after the channel's cancel handlers) has recorded why.
                    if !channel.isOpen || channel.outboundBytes > outboundLimit {
                        waiter.continuation = continuation
                        writers.append(waiter)
                    } else {
                        continuation.resume()
                    }
                }
            }
        } onCancel: {
            queue.async { [self] in
                waiter.cancelled = true
                guard let index = writers.firstIndex(where: { $0 === waiter }) else { return }
                writers.remove(at: index).resume(with: .failure(CancellationError()))
            }
        }
    }

    private func wakeWriters() {
        let waiting = writers
        writers = []
        for writer in waiting {
            if closed {
                writer.resume(with: .failure(failure ?? SocketError(.posix(EPIPE), operation: "send to", target: channel.label)))
            } else {
                writer.resume(with: .success(()))
            }
        }
    }

}

/// One suspended `read` or `write`, used only on the connection's queue.
///
/// Registering the wait and cancelling it both run on that serial queue, in whichever order they
/// happen: a cancellation that comes first marks the waiter, and the registration then fails at
/// once instead of waiting for a wake-up that would never come.
private final class Waiter<Value: Sendable>: @unchecked Sendable {
    var continuation: CheckedContinuation<Value, Error>?
    var cancelled = false

    func resume(with result: sending Result<Value, Error>) {
        continuation?.resume(with: result)
        continuation = nil
    }
}
