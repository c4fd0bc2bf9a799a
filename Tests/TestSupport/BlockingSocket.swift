import ChatProtocol
import Dispatch
import Foundation
import Glibc

/// A plain blocking TCP socket for tests that play a hostile client: one that pipelines without
/// reading, half-closes, or stops reading altogether. Every call has a timeout, so a server that
/// stops reading it (as it should) makes `send` return early instead of hanging the test, and
/// blocking calls run on Dispatch's threads, never on the test's concurrency pool.
///
/// Thread safety: use it from one task at a time; `descriptor` is closed once, by `close()`.
public final class BlockingSocket: @unchecked Sendable {
    /// The descriptor; owned by this object.
    public let descriptor: Int32
    private var decoder = FrameDecoder()
    private var closed = false

    /// Connects to `host:port` (IPv4 or IPv6 literal). `receiveBuffer` shrinks the kernel's
    /// receive buffer, so a client that does not read backs the server up sooner.
    public init(host: String = "127.0.0.1", port: Int, receiveBuffer: Int32? = nil) throws {
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
        guard connect(descriptor, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 else {
            let code = errno
            Glibc.close(descriptor)
            throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
        }
        self.descriptor = descriptor
    }

    deinit { close() }

    /// Sends `bytes`, waiting at most `timeout` whenever the kernel takes nothing; returns how many
    /// bytes went (fewer than all when the server stopped reading, or the connection ended).
    @discardableResult
    public func send(_ bytes: [UInt8], timeout: Duration = .seconds(2)) async -> Int {
        await blocking { [descriptor] in
            Self.setTimeout(descriptor, SO_SNDTIMEO, timeout)
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
    }

    /// Sends `frames` encoded back to back.
    @discardableResult
    public func send(_ frames: [Frame], timeout: Duration = .seconds(2)) async -> Int {
        var bytes: [UInt8] = []
        for frame in frames { FrameEncoder.encode(frame, into: &bytes) }
        return await send(bytes, timeout: timeout)
    }

    /// Ends this side's sending (the server reads end of stream); reading goes on.
    public func shutdownWrite() {
        _ = Glibc.shutdown(descriptor, Int32(SHUT_WR))
    }

    /// Reads frames until the server closes the connection or nothing arrives for `timeout`;
    /// returns them and whether the connection ended (rather than timing out).
    public func readFrames(timeout: Duration = .seconds(30)) async -> (frames: [Frame], ended: Bool) {
        let (bytes, ended) = await blocking { [descriptor] in
            Self.setTimeout(descriptor, SO_RCVTIMEO, timeout)
            var received: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while true {
                let count = recv(descriptor, &buffer, buffer.count, 0)
                if count < 0, errno == EINTR { continue }
                if count < 0 { return (received, errno != EAGAIN && errno != EWOULDBLOCK) }
                if count == 0 { return (received, true) }
                received += buffer[0..<count]
            }
        }
        decoder.append(contentsOf: bytes)
        var frames: [Frame] = []
        while let frame = try? decoder.next() { frames.append(frame) }
        return (frames, ended)
    }

    /// Closes the descriptor (once).
    public func close() {
        guard !closed else { return }
        closed = true
        Glibc.close(descriptor)
    }

    private static func setTimeout(_ descriptor: Int32, _ option: Int32, _ timeout: Duration) {
        let (seconds, attoseconds) = timeout.components
        var value = timeval(tv_sec: Int(seconds), tv_usec: Int(attoseconds / 1_000_000_000_000))
        setsockopt(descriptor, SOL_SOCKET, option, &value, socklen_t(MemoryLayout<timeval>.size))
    }

    private func blocking<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(returning: work()) }
        }
    }
}
