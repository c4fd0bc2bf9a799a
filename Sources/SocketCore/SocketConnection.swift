import Dispatch
import Glibc
import SocketTLS

/// A TCP connection for Swift concurrency: incoming bytes as an `AsyncSequence`, writes that
/// suspend while the peer is not keeping up.
///
/// Buffering is bounded in both directions. Incoming bytes that nobody consumes stop the channel
/// reading once `inboundLimit` bytes wait (the kernel then pushes back on the peer). A `write`
/// that finds more than `outboundLimit` bytes still waiting for the kernel suspends before it
/// queues anything, until they have left; so at most `outboundLimit` plus one write is ever buffered.
///
/// Every call throws only `SocketError`. A call whose task is cancelled ends with `ECANCELED`
/// (`SocketError.isCancellation`), and what that means is exact:
/// - a cancelled `connect` closes its socket before it returns;
/// - a cancelled `write` that was waiting for room has queued nothing, so retrying it sends its
///   bytes once; a write that has returned is committed, and cancelling its task later changes
///   nothing;
/// - a cancelled read loses no bytes: they are there for the next one.
///
/// Once the connection has failed or been closed, every write fails at once with the error that
/// ended it (`EPIPE` when it ended cleanly). A write's success means the bytes are queued, not that
/// the peer has them: the first write after the peer closed is usually accepted by the kernel, and
/// the peer's reset fails a later one.
///
/// The connection owns its socket; `close()` (or the peer going away) releases it.
public final class SocketConnection: Sendable {
    /// The bytes arriving from the peer, in chunks, until the peer shuts down its side; iterate it
    /// from one task at a time.
    public let inbound: InboundBytes
    /// Who the peer is, for messages.
    public let label: String

    private let core: ConnectionCore

    /// Connects to `host:port` (trying each resolved address in turn within `timeout`).
    ///
    /// With `tls` (a client context) the connection speaks TLS, verifying the server's certificate
    /// against `host` (also sent as SNI when it is a name). The handshake runs behind the returned
    /// connection: writes wait for it, and a failed handshake ends `inbound` and fails writes with
    /// the `SocketError` whose code is `.tls(TLSError)`.
    ///
    /// Cancelling the task ends the connect at once with `ECANCELED`, its socket closed.
    public static func connect(
        host: String, port: Int, timeout: Duration = .seconds(10),
        inboundLimit: Int = 256 * 1024, outboundLimit: Int = 256 * 1024, tls: TLSContext? = nil
    ) async throws(SocketError) -> SocketConnection {
        let socket = try await SocketConnector.connect(host: host, port: port, timeout: timeout)
        var session: TLSSession?
        if let tls {
            do {
                session = try tls.makeClientSession(serverName: host, peerLabel: socket.label)
            } catch {
                socket.close()
                throw SocketError.tls(error, target: socket.label)
            }
        }
        return SocketConnection(socket: socket, inboundLimit: inboundLimit, outboundLimit: outboundLimit, tls: session)
    }

    /// Takes over a connected socket (for example one accepted by `SocketListener`), speaking TLS
    /// through `tls` when one is given.
    public init(
        socket: Socket, on ioQueue: IOQueue = .next(), inboundLimit: Int = 256 * 1024, outboundLimit: Int = 256 * 1024,
        tls: TLSSession? = nil
    ) {
        label = socket.label
        core = ConnectionCore(
            channel: SocketChannel(socket: socket, queue: ioQueue.queue, readBuffer: ioQueue.readBuffer, tls: tls),
            inboundLimit: inboundLimit, outboundLimit: outboundLimit)
        inbound = InboundBytes(core: core)
        ioQueue.queue.async { [core] in core.start() }
    }

    /// Queues `bytes` for sending, first waiting while more than `outboundLimit` bytes wait for the
    /// peer (see the type's notes on cancellation and failure).
    public func write(_ bytes: some Collection<UInt8>) async throws(SocketError) {
        try await write(ByteChunk(bytes))
    }

    /// Queues `chunk` for sending without copying it, first waiting while more than
    /// `outboundLimit` bytes wait for the peer (see the type's notes on cancellation and failure).
    public func write(_ chunk: ByteChunk) async throws(SocketError) {
        try await core.write(chunk).get()
    }

    /// Shuts down the sending side once everything written has left; `inbound` keeps delivering.
    /// Later writes fail with `EPIPE`.
    public func shutdownWrite() {
        core.queue.async { [core] in core.shutdownWrite() }
    }

    /// Closes the connection; pending reads end and pending writes fail.
    public func close() {
        core.queue.async { [core] in core.channel.close() }
    }

    /// The negotiated TLS parameters (`TLS 1.3, TLS_AES_128_GCM_SHA256`), `handshaking`, or `nil`
    /// for a plain connection.
    public var tlsParameters: String? {
        get async {
            await withCheckedContinuation { continuation in
                core.queue.async { [core] in continuation.resume(returning: core.channel.tls?.parametersDescription) }
            }
        }
    }

    /// The server's (or client's) certificate as this side received it, and what verification
    /// would have said about it when verification was off; nil for a plain connection.
    public var tlsPeer: (certificate: TLSCertificateSummary?, ignoredFailure: TLSError?)? {
        get async {
            await withCheckedContinuation { continuation in
                core.queue.async { [core] in
                    continuation.resume(returning: core.channel.tls.map { ($0.peerCertificate, $0.ignoredVerificationFailure) })
                }
            }
        }
    }

    /// Runs `body` with the channel on its queue: for tests that look inside (the TLS session's
    /// buffers, the queue's bounds).
    func inspectChannel<T: Sendable>(_ body: @escaping @Sendable (SocketChannel) -> T) async -> T {
        await withCheckedContinuation { continuation in
            core.queue.async { [core] in continuation.resume(returning: body(core.channel)) }
        }
    }

    /// The channel's `outboundBytes` now (with TLS: plaintext not yet encrypted plus ciphertext
    /// not yet sent), for tests that check the bound on what a connection buffers.
    var outboundBytes: Int {
        get async {
            await withCheckedContinuation { continuation in
                core.queue.async { [core] in continuation.resume(returning: core.channel.outboundBytes) }
            }
        }
    }

    /// How many writes are suspended waiting for room, as the connection's queue sees them now.
    /// Lets tests act on a write that is certainly waiting instead of guessing how long to pause.
    var waitingWriteCount: Int {
        get async {
            await withCheckedContinuation { continuation in
                core.queue.async { [core] in continuation.resume(returning: core.waitingWriteCount) }
            }
        }
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
    /// The only error: the connection's failure, or `ECANCELED` when the reading task is cancelled.
    public typealias Failure = SocketError
    fileprivate let core: ConnectionCore

    /// Iterates `InboundBytes`.
    public struct AsyncIterator: AsyncIteratorProtocol {
        /// The connection's failure, or `ECANCELED`.
        public typealias Failure = SocketError
        fileprivate let core: ConnectionCore

        /// The next bytes, or `nil` at end of stream.
        public mutating func next() async throws(SocketError) -> [UInt8]? {
            try await core.read().get()
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
    /// Whether the channel has closed (its `onClosed` ran); `failure` then says why, if it failed.
    private var closed = false
    private var failure: SocketError?
    private var writeShutDown = false
    private var reader: PendingCall<[UInt8]?>?
    /// Writes waiting, oldest first: for room (their bytes not queued yet), or, once the channel is
    /// closing, for the error that closes it.
    private var waitingWrites: [PendingWrite] = []

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
        channel.onDrained = { [self] in admitWaitingWrites() }
        channel.onClosed = { [self] error in
            closed = true
            failure = failure ?? error
            inboundEnded = true
            wakeReader()
            let waiting = waitingWrites
            waitingWrites = []
            for write in waiting { write.call.resume(.failure(closedError)) }
        }
        channel.start()
    }

    // MARK: Reading

    private func received(_ bytes: UnsafeRawBufferPointer) {
        inbound.append(contentsOf: bytes)
        if inbound.count >= inboundLimit { channel.pauseReading() }
        wakeReader()
    }

    private func wakeReader() {
        guard let waiting = reader, let result = takeInbound() else { return }
        reader = nil
        waiting.resume(result)
    }

    /// What a read returns now, or `nil` when it has to wait.
    private func takeInbound() -> Result<[UInt8]?, SocketError>? {
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

    func read() async -> Result<[UInt8]?, SocketError> {
        let call = PendingCall<[UInt8]?>()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                queue.async { [self] in
                    call.continuation = continuation
                    guard !call.cancelled else {
                        call.resume(.failure(.cancelled("recv from", target: channel.label)))
                        return
                    }
                    precondition(reader == nil, "InboundBytes iterated from two tasks at once")
                    if let result = takeInbound() {
                        call.resume(result)
                    } else {
                        reader = call
                    }
                }
            }
        } onCancel: {
            queue.async { [self] in
                call.cancelled = true
                guard reader === call else { return }
                reader = nil
                call.resume(.failure(.cancelled("recv from", target: channel.label)))
            }
        }
    }

    // MARK: Writing

    /// Writes suspended in `waitingWrites`; read on `queue`.
    var waitingWriteCount: Int { waitingWrites.count }

    /// Why writes fail once the channel has closed.
    private var closedError: SocketError {
        failure ?? SocketError(.posix(EPIPE), operation: "send to", target: channel.label)
    }

    func write(_ chunk: ByteChunk) async -> Result<Void, SocketError> {
        let write = PendingWrite(chunk)
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                queue.async { [self] in
                    write.call.continuation = continuation
                    guard !write.call.cancelled else {
                        write.call.resume(.failure(.cancelled("send to", target: channel.label)))
                        return
                    }
                    if closed || writeShutDown {
                        write.call.resume(.failure(closedError))
                    } else if channel.isOpen, waitingWrites.isEmpty, channel.outboundBytes <= outboundLimit {
                        send(write)
                    } else {
                        waitingWrites.append(write)
                    }
                }
            }
        } onCancel: {
            queue.async { [self] in
                write.call.cancelled = true
                // Only a write still waiting can be taken back; one whose bytes are queued stands.
                guard let index = waitingWrites.firstIndex(where: { $0 === write }) else { return }
                waitingWrites.remove(at: index)
                write.call.resume(.failure(.cancelled("send to", target: channel.label)))
            }
        }
    }

    /// Queues a write's bytes on the open channel and settles the write.
    private func send(_ write: PendingWrite) {
        channel.write(write.chunk)
        if closed {
            // The send failed and the channel, with no source left to wait for, closed inside it.
            write.call.resume(.failure(closedError))
        } else if channel.isOpen {
            write.call.resume(.success(()))
        } else {
            // The send failed and the channel is closing: `onClosed` brings the error.
            waitingWrites.append(write)
        }
    }

    /// The channel's queue has drained: queue waiting writes, in order, until the limit is passed again.
    private func admitWaitingWrites() {
        while channel.isOpen, !waitingWrites.isEmpty, channel.outboundBytes <= outboundLimit {
            send(waitingWrites.removeFirst())
        }
    }

    func shutdownWrite() {
        writeShutDown = true
        channel.shutdownWrite()
    }
}

/// One suspended `read` or `write`, used only on the connection's queue.
///
/// Registering the wait and cancelling it both run on that serial queue, in whichever order they
/// happen: a cancellation that comes first marks the call, and the registration then fails it at
/// once instead of waiting for a wake-up that would never come. Resuming twice does nothing.
private final class PendingCall<Value: Sendable>: @unchecked Sendable {
    var continuation: CheckedContinuation<Result<Value, SocketError>, Never>?
    var cancelled = false

    func resume(_ result: sending Result<Value, SocketError>) {
        continuation?.resume(returning: result)
        continuation = nil
    }
}

/// A `write` with the bytes it will queue once there is room.
private final class PendingWrite: @unchecked Sendable {
    let chunk: ByteChunk
    let call = PendingCall<Void>()

    init(_ chunk: ByteChunk) {
        self.chunk = chunk
    }
}
