#if os(Linux)
import Dispatch
import Foundation
import Glibc
import SocketTLS

/// The TCP connection behind one `Stream.getStreamsToHost` pair.
///
/// Ownership: the pair owns the `Socket` once `SocketConnector` hands it over. It closes the
/// descriptor exactly once, when both streams are closed (or deallocated), and only after the
/// cancel handlers of its Dispatch sources have run; `close()` of the second stream waits for that,
/// so the descriptor is gone when the call returns, as with CFStream.
///
/// How events arise without polling: a Dispatch read source and write source watch the descriptor
/// on the private serial `queue`. When one fires, its handler suspends it and posts
/// `.hasBytesAvailable` / `.hasSpaceAvailable`. After each `read` / `write` the pair looks again
/// (a non-blocking peek or poll): still ready means the next event is posted at once, as
/// CFSocketStream does; not ready means the source is resumed to wait for readiness. So a
/// connection nobody reads or writes has its sources suspended or idle: no wakeups at all. The
/// read source peeks before posting, which turns the peer's FIN into `.endEncountered` and a reset
/// into `.errorOccurred` even when the delegate is not reading.
///
/// Looking before resuming is not only cheaper, it is needed: when the socket hangs up (both
/// directions finished, or reset), libdispatch's epoll backend delivers one last event and removes
/// the descriptor from epoll, so a source resumed after that never fires again. A hung-up socket
/// is always ready (end of stream or an error), so the pair never waits on a source for it.
///
/// `read` and `write` call `recv` / `send` directly on the caller's thread. Like Apple's socket
/// streams they block when there is nothing to read or no room at all (waiting on the sources,
/// not spinning), and never after the matching event: events are re-checked when delivered.
///
/// TLS (asked for with `socketSecurityLevelKey` or SSL settings before opening): the pair drives a
/// `TLSSession` under the same lock. The read side reads ciphertext to `EAGAIN`, feeds the session
/// and keeps up to `plaintextLimit` decrypted bytes in `plaintext`; `.hasBytesAvailable` is posted
/// for plaintext only. `.hasSpaceAvailable` is first posted when the handshake completes; a write
/// encrypts what it takes and sends the ciphertext, and what the kernel does not take waits in the
/// session for the write source (writes block while `plaintextLimit` of it waits). A TLS failure
/// is `.errorOccurred` with an `NSOSStatusErrorDomain` error (`SocketError+NSError`).
///
/// Threading: every method may be called from any thread; the source handlers and the connect
/// completion run on `queue`. `condition` protects all mutable state, including the socket and the
/// TLS session.
final class SocketStreamPair: StreamPairCore, @unchecked Sendable {
    /// How long a connect may take before the streams report `ETIMEDOUT`.
    static let connectTimeout: Duration = .seconds(60)

    private enum Connection {
        /// No stream opened yet.
        case idle
        /// `SocketConnector` is at work.
        case connecting
        /// `socket` is connected.
        case connected
        /// Connecting failed or was refused, or the connection broke (`streamError` is this);
        /// `socket` (if any) stays until both streams close.
        case failed(NSError)
        /// Both streams closed and the descriptor is closed.
        case closed
    }

    private let host: String
    private let port: Int
    /// Where the pair's sources and connect run: one of a few queues all pairs share, so that any
    /// number of pairs costs at most that many threads (a queue per pair let 300 pairs opening at
    /// once start 264 Dispatch threads). Handlers only take `condition` briefly, never wait on it.
    private let queue = SocketStreamPair.queues.next()
    private static let queues = QueueRing(label: "SocketStreams.pairs", count: max(2, System.coreCount))
    private let inputEvents = StreamEventDelivery()
    private let outputEvents = StreamEventDelivery()

    private let condition = NSCondition()
    private var connection = Connection.idle
    private var socket: Socket?
    private var inputStatus = Stream.Status.notOpen
    private var outputStatus = Stream.Status.notOpen
    private var inputError: NSError?
    private var outputError: NSError?
    /// The connect under way while `connection` is `.connecting`.
    private var connectAttempt: ConnectAttempt?
    /// What the app asked of the connection's security (`StreamSecurity`).
    private var security = StreamSecurity()
    /// The TLS session once connected, when TLS was asked for.
    private var tls: TLSSession?
    /// What the TLS session decrypted and no `read` has taken yet.
    private var plaintext: [UInt8] = []
    /// Whether the peer's close_notify (or end of stream) has been seen by the TLS read side.
    private var tlsInputEnded = false
    /// The most plaintext decrypted ahead of the reader, and the most ciphertext a writer may leave
    /// waiting before its next write blocks.
    static let plaintextLimit = 64 * 1024
    private var readSource: SuspendableSource?
    private var writeSource: SuspendableSource?
    /// The output stream was opened, then closed before the connection was up: send FIN once it is.
    private var shutdownWhenConnected = false
    private var liveSources = 0
    private var sourceEvents = 0

    /// How many times a Dispatch source has woken the pair; an idle pair must not add to it.
    var sourceEventCount: Int {
        condition.withLock { sourceEvents }
    }

    /// A pair that connects to `host:port` when the first of its streams is opened.
    init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// `host:port` for messages.
    private var target: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    func events(for side: StreamSide) -> StreamEventDelivery {
        side == .input ? inputEvents : outputEvents
    }

    // MARK: Status

    func status(_ side: StreamSide) -> Stream.Status {
        condition.withLock { side == .input ? inputStatus : outputStatus }
    }

    func error(_ side: StreamSide) -> Error? {
        condition.withLock { side == .input ? inputError : outputError }
    }

    private func setStatusLocked(_ side: StreamSide, _ status: Stream.Status) {
        if side == .input { inputStatus = status } else { outputStatus = status }
    }

    // MARK: Opening

    func open(_ side: StreamSide) {
        condition.withLock {
            guard status(ofLocked: side) == .notOpen else { return }
            switch connection {
            case .idle:
                setStatusLocked(side, .opening)
                if let refused = security.refused {
                    failLocked(StreamSecurity.refusal(refused, target: target))
                    return
                }
                connection = .connecting
                connectAttempt = SocketConnector.connect(host: host, port: port, timeout: Self.connectTimeout, queue: queue) {
                    [self] result in connectFinished(result)
                }
            case .connecting:
                setStatusLocked(side, .opening)
            case .connected:
                becomeOpenLocked(side)
            case .failed(let error):
                failSideLocked(side, error)
            case .closed:
                // Only reachable when both streams are closed, and a closed stream cannot reopen.
                break
            }
        }
    }

    /// Runs on `queue` when `SocketConnector` is done.
    private func connectFinished(_ result: Result<Socket, SocketError>) {
        condition.withLock {
            defer { condition.broadcast() }
            connectAttempt = nil
            if case .failed = connection {
                // Refused while connecting (TLS was asked for): the connection is not wanted.
                if case .success(let connected) = result { connected.close() }
                return
            }
            guard inputStatus != .closed || outputStatus != .closed else {
                // Both streams were closed while connecting (`close` cancelled the attempt).
                if case .success(let connected) = result { connected.close() }
                connection = .closed
                return
            }
            switch result {
            case .failure(let error):
                failLocked(error.nsError)
            case .success(let connected):
                socket = connected
                connection = .connected
                if security.wantsTLS {
                    do throws(TLSError) {
                        let context = try TLSContext(.client(trust: security.trust))
                        tls = try context.makeClientSession(serverName: security.serverName(host: host), peerLabel: target)
                    } catch {
                        failLocked(SocketError.tls(error, target: target).nsError)
                        return
                    }
                }
                if inputStatus != .closed { startReadSourceLocked(connected) }
                if outputStatus != .closed {
                    startWriteSourceLocked(connected)
                } else if shutdownWhenConnected {
                    shutdownWriteLocked()
                }
                // The ClientHello, when speaking TLS.
                flushCiphertextLocked()
                for side in [StreamSide.input, .output] where status(ofLocked: side) == .opening {
                    becomeOpenLocked(side)
                }
            }
        }
    }

    private func status(ofLocked side: StreamSide) -> Stream.Status {
        side == .input ? inputStatus : outputStatus
    }

    /// Moves an opened side of a connected pair to `.open` and posts what the delegate must hear.
    private func becomeOpenLocked(_ side: StreamSide) {
        setStatusLocked(side, .open)
        switch side {
        case .input:
            if readSource == nil {
                // The read source is gone only because the peer already finished sending.
                inputStatus = .atEnd
                inputEvents.post([.openCompleted, .endEncountered])
            } else if tls != nil {
                inputEvents.post(plaintext.isEmpty ? .openCompleted : [.openCompleted, .hasBytesAvailable])
            } else {
                inputEvents.post(readSource?.isSuspended == true ? [.openCompleted, .hasBytesAvailable] : .openCompleted)
            }
        case .output:
            if let tls {
                outputEvents.post(tls.isEstablished ? [.openCompleted, .hasSpaceAvailable] : .openCompleted)
            } else {
                outputEvents.post(writeSource?.isSuspended == true ? [.openCompleted, .hasSpaceAvailable] : .openCompleted)
            }
        }
    }

    // MARK: Dispatch sources

    private func startReadSourceLocked(_ socket: Socket) {
        let source = DispatchSource.makeReadSource(fileDescriptor: socket.descriptor, queue: queue)
        source.setEventHandler { [self] in readSourceFired() }
        source.setCancelHandler { [self] in sourceCancelled() }
        readSource = SuspendableSource(activating: source)
        liveSources += 1
    }

    private func startWriteSourceLocked(_ socket: Socket) {
        let source = DispatchSource.makeWriteSource(fileDescriptor: socket.descriptor, queue: queue)
        source.setEventHandler { [self] in writeSourceFired() }
        source.setCancelHandler { [self] in sourceCancelled() }
        writeSource = SuspendableSource(activating: source)
        liveSources += 1
    }

    /// On `queue`: the socket is readable.
    private func readSourceFired() {
        condition.withLock {
            guard socket != nil, let readSource, !readSource.isSuspended else { return }
            sourceEvents += 1
            defer { condition.broadcast() }
            checkInputLocked()
        }
    }

    /// On `queue`: the socket has room to send.
    private func writeSourceFired() {
        condition.withLock {
            guard let writeSource, !writeSource.isSuspended else { return }
            sourceEvents += 1
            defer { condition.broadcast() }
            writeSource.suspend()
            if let tls {
                // Room again for the ciphertext that waited; the app hears only once it is gone.
                flushCiphertextLocked()
                if tls.isEstablished, tls.pendingCiphertext.isEmpty, outputStatus == .open { outputEvents.post(.hasSpaceAvailable) }
                return
            }
            if outputStatus == .open { outputEvents.post(.hasSpaceAvailable) }
        }
    }

    /// On `queue`, once per source: the last one lets a waiting `close` close the descriptor.
    private func sourceCancelled() {
        condition.withLock {
            liveSources -= 1
            condition.broadcast()
        }
    }

    /// Peeks at the socket and acts on what is there: bytes post `.hasBytesAvailable` with the read
    /// source suspended until the next read; end of stream and errors are handled at once; only
    /// when nothing is there does the read source wait. Used when the source fires and after each
    /// read, so a hung-up socket, which the source reports only once, is never waited on.
    private func checkInputLocked() {
        if tls != nil { return checkTLSInputLocked() }
        guard let socket, readSource != nil else { return }
        do throws(SocketError) {
            switch try peek(socket) {
            case .wouldBlock:
                readSource?.resume()
            case .done(0):
                reachedEndLocked()
            case .done:
                readSource?.suspend()
                if inputStatus == .open { inputEvents.post(.hasBytesAvailable) }
            }
        } catch {
            failLocked(error.nsError)
        }
    }

    /// `checkInputLocked` with TLS: decrypts what the session holds and what the socket has (to
    /// `EAGAIN` or end of stream) until `plaintextLimit` bytes wait; sends what the session must
    /// answer (handshake messages, alerts); then posts `.hasBytesAvailable` for plaintext, ends the
    /// input after close_notify, or waits on the read source.
    private func checkTLSInputLocked() {
        guard let socket, let tls, readSource != nil else { return }
        var socketEnded = false
        do throws(TLSError) {
            try withUnsafeTemporaryAllocation(byteCount: 16 * 1024, alignment: 16) { scratch throws(TLSError) in
                while !tlsInputEnded, plaintext.count < Self.plaintextLimit {
                    switch try tls.readPlaintext(into: scratch) {
                    case .bytes(let count):
                        plaintext.append(contentsOf: UnsafeRawBufferPointer(rebasing: scratch[0..<count]))
                        continue
                    case .endOfInput:
                        tlsInputEnded = true
                        continue
                    case .needsCiphertext:
                        break
                    }
                    guard !socketEnded else { break }
                    let result: IOResult<Int>
                    do throws(SocketError) {
                        result = try socket.read(into: scratch)
                    } catch {
                        failLocked(error.nsError)
                        return
                    }
                    switch result {
                    case .wouldBlock:
                        return
                    case .done(0):
                        socketEnded = true
                        if try tls.receiveEndOfStream() == .handshakeCompleted { handshakeCompletedLocked() }
                    case .done(let count):
                        if try tls.receive(UnsafeRawBufferPointer(rebasing: scratch[0..<count])) == .handshakeCompleted {
                            handshakeCompletedLocked()
                        }
                    }
                }
            }
        } catch {
            // One try at the alert that tells the server why, without waiting.
            let pending = tls.pendingCiphertext
            if !pending.isEmpty { _ = try? socket.write(pending) }
            failLocked(SocketError.tls(error, target: target).nsError)
            return
        }
        guard case .connected = connection else { return }
        flushCiphertextLocked()
        if !plaintext.isEmpty {
            readSource?.suspend()
            if inputStatus == .open { inputEvents.post(.hasBytesAvailable) }
        } else if tlsInputEnded || socketEnded {
            reachedEndLocked()
        } else {
            readSource?.resume()
        }
    }

    /// The TLS handshake completed: the output may write now.
    private func handshakeCompletedLocked() {
        condition.broadcast()
        if outputStatus == .open { outputEvents.post(.hasSpaceAvailable) }
    }

    /// Sends the session's ciphertext until the kernel pushes back, then waits on the write source.
    private func flushCiphertextLocked() {
        guard let socket, let tls else { return }
        while !tls.pendingCiphertext.isEmpty {
            do throws(SocketError) {
                switch try socket.write(tls.pendingCiphertext) {
                case .done(let count):
                    tls.consumeCiphertext(count)
                case .wouldBlock:
                    writeSource?.resume()
                    return
                }
            } catch {
                failLocked(error.nsError)
                return
            }
        }
    }

    /// After a write: when there is still room, posts `.hasSpaceAvailable` now; only when there is
    /// none does the write source wait for it.
    private func rearmWriteLocked() {
        guard writeSource != nil else { return }
        if outputReadyLocked() {
            if outputStatus == .open { outputEvents.post(.hasSpaceAvailable) }
        } else {
            writeSource?.resume()
        }
    }

    private func cancelReadSourceLocked() {
        readSource?.cancel()
        readSource = nil
    }

    private func cancelWriteSourceLocked() {
        writeSource?.cancel()
        writeSource = nil
    }

    // MARK: End and failure

    /// The peer finished sending: the read source would fire forever, so it goes.
    private func reachedEndLocked() {
        cancelReadSourceLocked()
        if inputStatus == .open {
            inputStatus = .atEnd
            inputEvents.post(.endEncountered)
        }
    }

    /// The connection failed, broke or was refused: every opened side reports `error`; sides opened
    /// later do too.
    private func failLocked(_ error: NSError) {
        connection = .failed(error)
        cancelReadSourceLocked()
        cancelWriteSourceLocked()
        for side in [StreamSide.input, .output] {
            let current = status(ofLocked: side)
            if current == .opening || current == .open { failSideLocked(side, error) }
        }
        condition.broadcast()
    }

    private func failSideLocked(_ side: StreamSide, _ error: NSError) {
        setStatusLocked(side, .error)
        if side == .input {
            inputError = error
            inputEvents.post(.errorOccurred)
        } else {
            outputError = error
            outputEvents.post(.errorOccurred)
        }
    }

    // MARK: Closing

    func close(_ side: StreamSide) {
        condition.withLock {
            let previous = status(ofLocked: side)
            guard previous != .closed else { return }
            setStatusLocked(side, .closed)
            switch side {
            case .input:
                cancelReadSourceLocked()
            case .output:
                cancelWriteSourceLocked()
                // Closing an opened output alone sends FIN and leaves the input readable, as on
                // Apple platforms. An output never opened (or never asked for) sends nothing.
                if previous != .notOpen, inputStatus != .closed {
                    if case .connecting = connection { shutdownWhenConnected = true }
                    shutdownWriteLocked()
                }
            }
            condition.broadcast()
            guard inputStatus == .closed, outputStatus == .closed else { return }
            if case .connecting = connection {
                // As with CFStream, the socket goes now, not when the connect would have ended:
                // the attempt closes it, then `connectFinished` marks the pair closed.
                connectAttempt?.cancel()
                while case .connecting = connection { condition.wait() }
                return
            }
            while liveSources > 0 { condition.wait() }
            socket?.close()
            socket = nil
            connection = .closed
        }
    }

    private func shutdownWriteLocked() {
        guard case .connected = connection, let socket else { return }
        if let tls {
            // close_notify first, so the peer can tell our end from a cut connection. Best effort:
            // what the kernel does not take at once is lost with the shutdown.
            tls.closeOutput()
            flushCiphertextLocked()
        }
        // ENOTCONN means the peer is gone already; the input side hears of it by itself.
        try? socket.shutdownWrite()
    }

    // MARK: Reading and writing

    func read(_ buffer: UnsafeMutablePointer<UInt8>, maxLength: Int) -> Int {
        condition.withLock {
            while true {
                switch inputStatus {
                case .opening:
                    // Apple's streams wait for the connection in a read made while opening.
                    condition.wait()
                    continue
                case .atEnd:
                    return 0
                case .open:
                    break
                default:
                    return -1
                }
                guard let socket, maxLength > 0 else { return maxLength == 0 ? 0 : -1 }
                if tls != nil {
                    if !plaintext.isEmpty {
                        let count = min(maxLength, plaintext.count)
                        plaintext.withUnsafeBytes { UnsafeMutableRawPointer(buffer).copyMemory(from: $0.baseAddress!, byteCount: count) }
                        plaintext.removeFirst(count)
                        if plaintext.isEmpty { checkTLSInputLocked() }
                        return count
                    }
                    checkTLSInputLocked()
                    if plaintext.isEmpty, inputStatus == .open { condition.wait() }
                    continue
                }
                do throws(SocketError) {
                    switch try socket.read(into: UnsafeMutableRawBufferPointer(start: buffer, count: maxLength)) {
                    case .done(0):
                        reachedEndLocked()
                        return 0
                    case .done(let count):
                        checkInputLocked()
                        return count
                    case .wouldBlock:
                        // Nothing yet: block like Apple's socket streams, until the read source fires.
                        readSource?.resume()
                        condition.wait()
                    }
                } catch {
                    failLocked(error.nsError)
                    return -1
                }
            }
        }
    }

    func write(_ buffer: UnsafePointer<UInt8>, maxLength: Int) -> Int {
        condition.withLock {
            while true {
                switch outputStatus {
                case .opening:
                    condition.wait()
                    continue
                case .open:
                    break
                default:
                    return -1
                }
                guard let socket, maxLength > 0 else { return maxLength == 0 ? 0 : -1 }
                if let tls {
                    // Like Apple's, a write before the handshake completes waits for it.
                    guard tls.isEstablished, tls.pendingCiphertext.count < Self.plaintextLimit else {
                        flushCiphertextLocked()
                        condition.wait()
                        continue
                    }
                    let taken: Int
                    do throws(TLSError) {
                        taken = try tls.encrypt(
                            CollectionOfOne(UnsafeRawBufferPointer(start: buffer, count: maxLength)), limit: Self.plaintextLimit)
                    } catch {
                        failLocked(SocketError.tls(error, target: target).nsError)
                        return -1
                    }
                    flushCiphertextLocked()
                    if tls.pendingCiphertext.isEmpty { rearmWriteLocked() }
                    return taken
                }
                do throws(SocketError) {
                    switch try socket.write(UnsafeRawBufferPointer(start: buffer, count: maxLength)) {
                    case .done(let count):
                        rearmWriteLocked()
                        return count
                    case .wouldBlock:
                        // No room at all: block until the write source says there is some.
                        writeSource?.resume()
                        condition.wait()
                    }
                } catch {
                    failLocked(error.nsError)
                    return -1
                }
            }
        }
    }

    var hasBytesAvailable: Bool {
        condition.withLock { inputStatus == .open && inputReadyLocked() }
    }

    var hasSpaceAvailable: Bool {
        condition.withLock { outputStatus == .open && outputReadyLocked() }
    }

    /// Whether a read would return at once: data, end of stream or an error is waiting.
    private func inputReadyLocked() -> Bool {
        guard let socket else { return false }
        if tls != nil { return !plaintext.isEmpty || tlsInputEnded }
        switch Result(catching: { () throws(SocketError) in try peek(socket) }) {
        case .success(.wouldBlock): return false
        case .success(.done), .failure: return true
        }
    }

    /// Whether a write would return at once: there is room, or the socket has failed.
    private func outputReadyLocked() -> Bool {
        guard let socket else { return false }
        if let tls, !tls.isEstablished || !tls.pendingCiphertext.isEmpty { return false }
        var descriptor = pollfd(fd: socket.descriptor, events: Int16(POLLOUT), revents: 0)
        return Glibc.poll(&descriptor, 1, 0) > 0
    }

    private func peek(_ socket: Socket) throws(SocketError) -> IOResult<Int> {
        var byte: UInt8 = 0
        return try retryingInterruptsNonBlocking("recv from", target: socket.label) {
            recv(socket.descriptor, &byte, 1, Int32(MSG_PEEK) | Int32(MSG_DONTWAIT))
        }
    }

    func stillHolds(_ event: Stream.Event, for side: StreamSide) -> Bool {
        condition.withLock {
            let current = status(ofLocked: side)
            switch event {
            case .openCompleted:
                return current != .opening
            case .hasBytesAvailable:
                guard side == .input, current == .open else { return false }
                if inputReadyLocked() { return true }
                // Already read past (a `while hasBytesAvailable` loop): watch for the next bytes.
                readSource?.resume()
                return false
            case .hasSpaceAvailable:
                guard side == .output, current == .open else { return false }
                if outputReadyLocked() { return true }
                writeSource?.resume()
                return false
            case .errorOccurred:
                return current == .error
            case .endEncountered:
                return current == .atEnd
            default:
                return false
            }
        }
    }

    // MARK: Properties

    /// Takes the security properties (`StreamSecurity`), for both streams of the pair, before they
    /// open; every other property, and any once opening has begun, is refused with `false`.
    func setProperty(_ value: AnyObject?, forKey key: Stream.PropertyKey) -> Bool {
        guard StreamSecurity.isSecurityKey(key) else { return false }
        return condition.withLock {
            guard case .idle = connection, inputStatus == .notOpen, outputStatus == .notOpen else { return false }
            return security.set(value, forKey: key)
        }
    }

    /// Answers CFSocketStream's socket properties: `kCFStreamPropertySocketNativeHandle` (the
    /// descriptor as `Data` of an `Int32`, while connected), `kCFStreamPropertySocketRemoteHostName`
    /// and `kCFStreamPropertySocketRemotePortNumber` (what was asked for, not what it resolved to).
    func property(forKey key: Stream.PropertyKey, side: StreamSide) -> AnyObject? {
        switch key.rawValue {
        case "kCFStreamPropertySocketNativeHandle":
            return condition.withLock {
                guard let socket, !socket.isClosed else { return nil }
                var descriptor = socket.descriptor
                return NSData(bytes: &descriptor, length: MemoryLayout<Int32>.size)
            }
        case "kCFStreamPropertySocketRemoteHostName":
            return NSString(string: host)
        case "kCFStreamPropertySocketRemotePortNumber":
            return NSNumber(value: port)
        default:
            return condition.withLock { security.value(forKey: key) }
        }
    }
}
#endif
