import Foundation
import Glibc
import SocketCore
@testable import SocketTLS

/// One end of a real loopback TCP connection, driven the way a channel will drive it: non-blocking
/// reads fed to the session, plaintext read out, ciphertext sent as the socket takes it. Without a
/// session it is a plain-text peer (bytes go out and come in as they are).
///
/// Thread confinement, not a lock: while `drive` runs, only its thread touches the end; the test
/// reads it between drives, never during one.
final class LoopbackEnd: @unchecked Sendable {
    let socket: Socket
    let session: TLSSession?
    /// What arrived: plaintext through the session, or the raw bytes without one.
    var received: [UInt8] = []
    /// Whether the peer's close_notify arrived (with a session) or its TCP stream ended (without).
    var inputEnded = false
    /// The TLS failure that ended this end.
    var error: TLSError?
    /// A socket failure (a reset, typically) that ended this end.
    var socketError: SocketError?
    /// Whether the handshake completed here.
    var handshakeCompleted = false
    /// Bytes queued by `send` and not yet encrypted (or, without a session, not yet sent).
    private var unsent: [UInt8] = []
    private var closeRequested = false
    private var tcpEnded = false

    init(socket: Socket, session: TLSSession?) {
        self.socket = socket
        self.session = session
    }

    /// Whether this end has closed its socket (after a failure or once both directions ended).
    var isClosed: Bool { socket.isClosed }

    /// Queues bytes to send.
    func send(_ bytes: [UInt8]) { unsent += bytes }

    /// Asks for this end's close_notify (and TCP shutdown) after everything queued.
    func closeOutput() { closeRequested = true }

    /// Does whatever can be done without blocking; returns whether anything happened.
    func step() -> Bool {
        guard !socket.isClosed else { return false }
        var moved = encryptQueued()
        if sendPending() { moved = true }
        if readAvailable() { moved = true }
        if error != nil || socketError != nil {
            // As a channel would: let the alert that says why go out if it can, then close.
            _ = sendPending()
            socket.close()
            return true
        }
        if tcpEnded && tcpShutDown {
            socket.close()
            return true
        }
        return moved
    }

    /// Whether this end wants to be told when its socket is writable.
    var wantsWritable: Bool { pendingCount > 0 }

    private var pendingCount: Int {
        session?.pendingCiphertext.count ?? unsent.count
    }

    private func encryptQueued() -> Bool {
        guard let session else { return false }
        guard session.isEstablished else { return false }
        var moved = false
        if !unsent.isEmpty {
            do {
                let consumed = try unsent.withBytes { bytes throws(TLSError) in
                    try session.encrypt(CollectionOfOne(bytes), limit: 256 * 1024)
                }
                unsent.removeFirst(consumed)
                moved = consumed > 0
            } catch {
                self.error = error
                return true
            }
        }
        if unsent.isEmpty, closeRequested {
            closeRequested = false
            session.closeOutput()
            moved = true
        }
        return moved
    }

    /// Sends pending ciphertext (or raw bytes) until the socket pushes back.
    private func sendPending() -> Bool {
        var moved = false
        while true {
            let pending: [UInt8] = session.map { Array($0.pendingCiphertext) } ?? unsent
            if pending.isEmpty { break }
            let result: IOResult<Int>
            do {
                result = try pending.withBytes { bytes throws(SocketError) in try socket.write(bytes) }
            } catch {
                socketError = error
                return true
            }
            guard case .done(let written) = result else { break }
            if let session { session.consumeCiphertext(written) } else { unsent.removeFirst(written) }
            moved = true
        }
        if pendingCount == 0, outputFinished, !tcpShutDown {
            tcpShutDown = true
            try? socket.shutdownWrite()
            moved = true
        }
        return moved
    }

    private var tcpShutDown = false

    /// Whether everything this end will ever send has been handed over: close_notify queued, or
    /// (without a session) the last raw byte.
    private var outputFinished: Bool {
        guard let session else { return closeRequested && unsent.isEmpty }
        if case .established(_, outputOpen: false) = session.state { return true }
        return false
    }

    /// Reads until the socket has nothing more, feeding the session and collecting plaintext.
    private func readAvailable() -> Bool {
        var moved = false
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        while !tcpEnded {
            let result: IOResult<Int>
            do {
                result = try buffer.withMutableBytes { bytes throws(SocketError) in try socket.read(into: bytes) }
            } catch {
                socketError = error
                return true
            }
            guard case .done(let count) = result else { break }
            moved = true
            do throws(TLSError) {
                if count == 0 {
                    tcpEnded = true
                    if let session {
                        if try session.receiveEndOfStream() == .handshakeCompleted { handshakeCompleted = true }
                    } else {
                        inputEnded = true
                    }
                } else if let session {
                    let outcome = try buffer.withBytes { bytes throws(TLSError) in
                        try session.receive(UnsafeRawBufferPointer(rebasing: bytes[0..<count]))
                    }
                    if outcome == .handshakeCompleted { handshakeCompleted = true }
                } else {
                    received += buffer[0..<count]
                }
                try drainPlaintext()
            } catch {
                self.error = error
                return true
            }
        }
        return moved
    }

    private func drainPlaintext() throws(TLSError) {
        guard let session, !inputEnded else { return }
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let result = try buffer.withMutableBytes { bytes throws(TLSError) in try session.readPlaintext(into: bytes) }
            switch result {
            case .bytes(let count): received += buffer[0..<count]
            case .needsCiphertext: return
            case .endOfInput:
                inputEnded = true
                return
            }
        }
    }
}

/// Drives `ends` with poll(2) until `condition` holds (returns true) or `timeout` passes (false).
/// Never sleeps on a guess: it waits for the sockets, 50 ms at a time, and checks after each event.
///
/// The loop blocks in poll(2), so it runs on a thread of its own: on the concurrency runtime's
/// pool (two threads on two cores) it would starve other suites' tasks running meanwhile.
@discardableResult
func drive(
    _ ends: [LoopbackEnd], timeout: Duration = .seconds(30), until condition: @escaping @Sendable () -> Bool
) async -> Bool {
    await withCheckedContinuation { continuation in
        Thread { continuation.resume(returning: driveBlocking(ends, timeout: timeout, until: condition)) }.start()
    }
}

private func driveBlocking(_ ends: [LoopbackEnd], timeout: Duration, until condition: () -> Bool) -> Bool {
    let deadline = ContinuousClock.now + timeout
    while true {
        var moved = true
        while moved {
            moved = false
            for end in ends where end.step() { moved = true }
        }
        if condition() { return true }
        if ContinuousClock.now > deadline { return false }
        var descriptors = ends.filter { !$0.isClosed }.map { end in
            pollfd(fd: end.socket.descriptor, events: Int16(POLLIN) | (end.wantsWritable ? Int16(POLLOUT) : 0), revents: 0)
        }
        if descriptors.isEmpty { return condition() }
        _ = poll(&descriptors, nfds_t(descriptors.count), 50)
    }
}

/// A connected pair of non-blocking loopback sockets: (the connecting side, the accepted side).
func loopbackSocketPair(ip: String = "127.0.0.1") throws -> (client: Socket, server: Socket) {
    let listener = try listeningSocket(ip: ip)
    defer { listener.close() }
    let client = try connectedSocket(ip: ip, port: try listener.localAddress().port)
    guard let server = try acceptOne(from: listener) else { throw HarnessError("no connection to accept") }
    return (client, server)
}

/// A listening non-blocking socket on `ip`, port 0.
func listeningSocket(ip: String = "127.0.0.1") throws -> Socket {
    guard let address = SocketAddress(ip: ip, port: 0) else { throw HarnessError("bad address \(ip)") }
    let listener = try Socket(family: address.family, label: ip)
    try listener.setOption(level: SOL_SOCKET, name: SO_REUSEADDR, value: 1, "SO_REUSEADDR")
    try listener.bind(to: address)
    try listener.listen(backlog: 8)
    return listener
}

/// Waits (up to 30 s) for one connection on `listener` and accepts it.
func acceptOne(from listener: Socket, timeout: Duration = .seconds(30)) throws -> Socket? {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if let accepted = try listener.accept() { return accepted }
        var descriptor = pollfd(fd: listener.descriptor, events: Int16(POLLIN), revents: 0)
        _ = poll(&descriptor, 1, 50)
    }
    return nil
}

/// A non-blocking socket connected to `ip`:`port`.
func connectedSocket(ip: String = "127.0.0.1", port: Int) throws -> Socket {
    guard let address = SocketAddress(ip: ip, port: port) else { throw HarnessError("bad address \(ip)") }
    let socket = try Socket(family: address.family, label: address.description)
    if case .wouldBlock = try socket.connect(to: address) {
        var descriptor = pollfd(fd: socket.descriptor, events: Int16(POLLOUT), revents: 0)
        _ = poll(&descriptor, 1, 30_000)
        let pending = try socket.pendingError()
        guard pending == 0 else { throw SocketError(.posix(pending), operation: "connect", target: address.description) }
    }
    return socket
}

/// A failure of the test harness itself.
struct HarnessError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
