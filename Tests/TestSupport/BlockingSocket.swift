import ChatProtocol
import Dispatch
import Foundation
import Glibc
import SocketTLS

/// A blocking TCP socket, plain or TLS, for tests that play a hostile client: one that pipelines
/// without reading, half-closes, or stops reading altogether. Every call has a timeout, so a server
/// that stops reading it (as it should) makes `send` return early instead of hanging the test, and
/// blocking calls run on Dispatch's threads, never on the test's concurrency pool.
///
/// With TLS the handshake is made by the first `send` or read, within that call's timeout, so a
/// server that never answers it cannot block the initialiser.
///
/// Thread safety: use it from one task at a time (that is what guards `decoder` and `session`);
/// `descriptor` is closed once, by `close()`.
public final class BlockingSocket: @unchecked Sendable {
    /// The descriptor; owned by this object.
    public let descriptor: Int32
    private var decoder = FrameDecoder()
    private var closed = false
    /// The TLS session when the socket speaks TLS; its ClientHello is pending from the start.
    private let session: TLSSession?

    /// Connects to `host:port` (IPv4 or IPv6 literal). `receiveBuffer` shrinks the kernel's
    /// receive buffer, so a client that does not read backs the server up sooner. With `tls` the
    /// connection speaks TLS and verifies the server's certificate against `host`.
    /// `source`, an IPv4 literal, is the local address to connect from (any of 127.0.0.0/8 reaches
    /// a server on 127.0.0.1), so one test can play clients from many addresses.
    public init(
        host: String = "127.0.0.1", port: Int, receiveBuffer: Int32? = nil, tls: TLSContext? = nil, source: String? = nil
    ) throws {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_NUMERICHOST
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &list) == 0, let info = list else {
            throw POSIXError(.EINVAL)
        }
        defer { freeaddrinfo(list) }
        let descriptor = socket(info.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        if var size = receiveBuffer {
            setsockopt(descriptor, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        if let source {
            var local = sockaddr_in()
            local.sin_family = sa_family_t(AF_INET)
            guard inet_pton(AF_INET, source, &local.sin_addr) == 1 else {
                Glibc.close(descriptor)
                throw POSIXError(.EINVAL)
            }
            let bound = withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard bound == 0 else {
                let code = errno
                Glibc.close(descriptor)
                throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
            }
        }
        guard connect(descriptor, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 else {
            let code = errno
            Glibc.close(descriptor)
            throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
        }
        do {
            session = try tls?.makeClientSession(serverName: host, peerLabel: "\(host):\(port)")
        } catch {
            Glibc.close(descriptor)
            throw error
        }
        self.descriptor = descriptor
    }

    /// Connects to `server` as its clients do: over TLS when it speaks TLS.
    public convenience init(to server: ChatServerProcess, host: String = "127.0.0.1", receiveBuffer: Int32? = nil) throws {
        try self.init(host: host, port: server.port, receiveBuffer: receiveBuffer, tls: server.clientTLS)
    }

    deinit { close() }

    /// Sends `bytes`, waiting at most `timeout` whenever the kernel takes nothing; returns how many
    /// bytes went (fewer than all when the server stopped reading, or the connection ended). With
    /// TLS, the plaintext bytes encrypted, of which the last record may not all have gone.
    @discardableResult
    public func send(_ bytes: [UInt8], timeout: Duration = .seconds(2)) async -> Int {
        await blocking { [self] in
            Self.setTimeout(descriptor, SO_SNDTIMEO, timeout)
            guard let session else { return sendPlain(bytes) }
            Self.setTimeout(descriptor, SO_RCVTIMEO, timeout)
            guard handshake() else { return 0 }
            var sent = 0
            while sent < bytes.count {
                // A record's worth at a time, so that little ciphertext waits here once the server
                // stops reading.
                let taken = bytes.withUnsafeBytes { buffer in
                    (try? session.encrypt(CollectionOfOne(UnsafeRawBufferPointer(rebasing: buffer[sent...])), limit: 16_384)) ?? 0
                }
                guard taken > 0 else { break }
                sent += taken
                guard flushCiphertext() else { break }
            }
            return sent
        }
    }

    /// Sends `frames` encoded back to back.
    @discardableResult
    public func send(_ frames: [Frame], timeout: Duration = .seconds(2)) async -> Int {
        var bytes: [UInt8] = []
        for frame in frames { FrameEncoder.encode(frame, into: &bytes) }
        return await send(bytes, timeout: timeout)
    }

    /// Ends this side's sending (the server reads end of stream; with TLS, close_notify first);
    /// reading goes on.
    public func shutdownWrite() {
        if let session {
            session.closeOutput()
            _ = flushCiphertext()
        }
        _ = Glibc.shutdown(descriptor, Int32(SHUT_WR))
    }

    /// Reads frames until the server closes the connection or nothing arrives for `timeout`;
    /// returns them and whether the connection ended (rather than timing out).
    public func readFrames(timeout: Duration = .seconds(30)) async -> (frames: [Frame], ended: Bool) {
        let ended = await blocking { [self] in
            Self.setTimeout(descriptor, SO_RCVTIMEO, timeout)
            Self.setTimeout(descriptor, SO_SNDTIMEO, timeout)
            while true {
                switch receive() {
                case .bytes(let bytes): decoder.append(contentsOf: bytes)
                case .ended: return true
                case .timedOut: return false
                }
            }
        }
        var frames: [Frame] = []
        while let frame = try? decoder.next() { frames.append(frame) }
        return (frames, ended)
    }

    /// The next frame, or nil if the connection ends or `timeout` passes without one.
    public func nextFrame(timeout: Duration = .seconds(30)) async -> Frame? {
        if let frame = try? decoder.next() { return frame }
        let deadline = ContinuousClock.now + timeout
        return await blocking { [self] in
            while ContinuousClock.now < deadline {
                Self.setTimeout(descriptor, SO_RCVTIMEO, deadline - ContinuousClock.now)
                Self.setTimeout(descriptor, SO_SNDTIMEO, deadline - ContinuousClock.now)
                guard case .bytes(let bytes) = receive() else { return nil }
                decoder.append(contentsOf: bytes)
                if let frame = try? decoder.next() { return frame }
            }
            return nil
        }
    }

    /// Closes the descriptor (once).
    public func close() {
        guard !closed else { return }
        closed = true
        Glibc.close(descriptor)
    }

    // MARK: Blocking I/O, on a Dispatch thread

    /// What one read brought.
    private enum Received: Equatable {
        /// Bytes of the stream (plaintext with TLS; possibly none, for a record that held none).
        case bytes([UInt8])
        /// The server closed the connection (with TLS: or it failed).
        case ended
        /// Nothing arrived within the receive timeout.
        case timedOut
    }

    /// Reads once from the socket, decrypting with TLS.
    private func receive() -> Received {
        guard let session else { return receiveRaw() }
        guard handshake() else { return .ended }
        if session.hasBufferedInput, let plaintext = readPlaintext(session) { return plaintext }
        let raw = receiveRaw()
        do {
            switch raw {
            case .bytes(let ciphertext): _ = try ciphertext.withUnsafeBytes { buffer throws(TLSError) in try session.receive(buffer) }
            case .ended: _ = try session.receiveEndOfStream()
            case .timedOut: return .timedOut
            }
        } catch {
            return .ended
        }
        // Key updates and alerts may need an answer.
        _ = flushCiphertext()
        return readPlaintext(session) ?? (raw == .ended ? .ended : .bytes([]))
    }

    /// The plaintext the session holds now; `.ended` at close_notify or a failure, nil when it
    /// needs more ciphertext first.
    private func readPlaintext(_ session: TLSSession) -> Received? {
        var plaintext: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let read: TLSSession.PlaintextRead
            do {
                read = try buffer.withUnsafeMutableBytes { chunk throws(TLSError) in try session.readPlaintext(into: chunk) }
            } catch {
                return plaintext.isEmpty ? .ended : .bytes(plaintext)
            }
            switch read {
            case .bytes(let count): plaintext += buffer[0..<count]
            case .needsCiphertext: return plaintext.isEmpty ? nil : .bytes(plaintext)
            case .endOfInput: return plaintext.isEmpty ? .ended : .bytes(plaintext)
            }
        }
    }

    /// One `recv` of raw bytes from the socket.
    private func receiveRaw() -> Received {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = recv(descriptor, &buffer, buffer.count, 0)
            if count < 0, errno == EINTR { continue }
            if count < 0 { return errno == EAGAIN || errno == EWOULDBLOCK ? .timedOut : .ended }
            return count == 0 ? .ended : .bytes(Array(buffer[0..<count]))
        }
    }

    /// Sends plain `bytes` until done or the send timeout passes with nothing taken.
    private func sendPlain(_ bytes: [UInt8]) -> Int {
        var sent = 0
        while sent < bytes.count {
            let count = bytes.withUnsafeBytes { buffer in
                Glibc.send(descriptor, buffer.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL))
            }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { break }
            sent += count
        }
        return sent
    }

    /// Sends all the ciphertext the session has pending; false if the socket stopped taking it.
    private func flushCiphertext() -> Bool {
        guard let session else { return true }
        while session.pendingCiphertext.count > 0 {
            let pending = session.pendingCiphertext
            let count = Glibc.send(descriptor, pending.baseAddress!, pending.count, Int32(MSG_NOSIGNAL))
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { return false }
            session.consumeCiphertext(count)
        }
        return true
    }

    /// Completes the TLS handshake if it is not yet; false if it failed, the server closed, or
    /// the socket's timeouts passed.
    private func handshake() -> Bool {
        guard let session else { return true }
        while !session.isEstablished {
            guard flushCiphertext(), case .bytes(let ciphertext) = receiveRaw() else { return false }
            do {
                _ = try ciphertext.withUnsafeBytes { buffer throws(TLSError) in try session.receive(buffer) }
            } catch {
                _ = flushCiphertext()
                return false
            }
        }
        return flushCiphertext()
    }

    private static func setTimeout(_ descriptor: Int32, _ option: Int32, _ timeout: Duration) {
        let (seconds, attoseconds) = max(timeout, .milliseconds(1)).components
        var value = timeval(tv_sec: Int(seconds), tv_usec: Int(attoseconds / 1_000_000_000_000))
        setsockopt(descriptor, SOL_SOCKET, option, &value, socklen_t(MemoryLayout<timeval>.size))
    }

    private func blocking<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(returning: work()) }
        }
    }
}
