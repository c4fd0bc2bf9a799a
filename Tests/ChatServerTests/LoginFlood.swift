import ChatProtocol
import Dispatch
import Foundation
import Glibc
import SocketCore

/// A flood of wrong logins from many loopback addresses, kept up until stopped: each connection
/// keeps one login in flight and sends the next once the last is answered (`busy` and
/// `throttled` answers after a pause of `pause`, so a refused attacker does not spin), taking
/// the accounts `targets` in turn. One thread `poll`s every connection, so three hundred
/// attackers cost the test one thread, not three hundred.
///
/// Bounded: it stops by itself after `limit` at the latest.
final class LoginFlood: @unchecked Sendable {
    /// The answers the attackers got, by error code (`.internal` for a connection that ended).
    /// Guarded by `lock`, like `stopping`.
    private var answers: [ErrorCode: Int] = [:]
    private var stopping = false
    private let lock = NSLock()
    private let finished = DispatchSemaphore(value: 0)
    private var attackers: [Attacker] = []

    private struct Attacker {
        var descriptor: Int32
        var decoder = FrameDecoder()
        var sent = 0
        /// When its next login may go (uptime nanoseconds), after a refusal; 0: in flight.
        var nextAt: UInt64 = 0
        var open = true
    }

    /// Connects one attacker from each of `sources` (IPv4 loopback addresses) to `port` and sends
    /// each a version 3 `hello` and its first wrong login at one of `targets`.
    init(port: Int, sources: [String], targets: [String], pause: Duration = .milliseconds(50), limit: Duration = .seconds(60)) throws {
        for (index, source) in sources.enumerated() {
            let descriptor = try Self.connect(port: port, from: source)
            var attacker = Attacker(descriptor: descriptor)
            Self.send([.hello(version: 3, nick: "flood\(index)", password: nil)], on: descriptor)
            Self.sendLogin(&attacker, targets: targets, index: index)
            attackers.append(attacker)
        }
        let pauseNanoseconds = UInt64(pause / .nanoseconds(1))
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(limit / .nanoseconds(1))
        Thread.detachNewThread { [self] in
            run(targets: targets, pause: pauseNanoseconds, deadline: deadline)
            finished.signal()
        }
    }

    /// Stops the flood, closes its connections and returns the answers it got.
    func stop() async -> [ErrorCode: Int] {
        lock.withLock { stopping = true }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                self.finished.wait()
                continuation.resume()
            }
        }
        return lock.withLock { answers }
    }

    /// The answers so far.
    var answered: [ErrorCode: Int] { lock.withLock { answers } }

    private func run(targets: [String], pause: UInt64, deadline: UInt64) {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !lock.withLock({ stopping }), DispatchTime.now().uptimeNanoseconds < deadline {
            var polled = attackers.map { pollfd(fd: $0.open ? $0.descriptor : -1, events: Int16(POLLIN), revents: 0) }
            _ = poll(&polled, nfds_t(polled.count), 10)
            let now = DispatchTime.now().uptimeNanoseconds
            for index in attackers.indices where attackers[index].open {
                if polled[index].revents != 0 { read(index, buffer: &buffer, pause: pause) }
                if attackers[index].open, attackers[index].nextAt != 0, attackers[index].nextAt <= now {
                    Self.sendLogin(&attackers[index], targets: targets, index: index)
                }
            }
        }
        for attacker in attackers { close(attacker.descriptor) }
    }

    private func read(_ index: Int, buffer: inout [UInt8], pause: UInt64) {
        let count = buffer.withUnsafeMutableBytes { recv(attackers[index].descriptor, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
        guard count != 0, !(count < 0 && errno != EAGAIN && errno != EINTR) else {
            attackers[index].open = false
            lock.withLock { answers[.internal, default: 0] += 1 }
            return
        }
        guard count > 0 else { return }
        attackers[index].decoder.append(contentsOf: buffer[0..<count])
        while let frame = try? attackers[index].decoder.next() {
            guard case .error(let code, _, .login, _) = frame else { continue }
            lock.withLock { answers[code, default: 0] += 1 }
            // The next login after a pause: refused attackers do not spin.
            attackers[index].nextAt = DispatchTime.now().uptimeNanoseconds + (code == .authenticationFailed ? 1 : pause)
        }
    }

    private static func sendLogin(_ attacker: inout Attacker, targets: [String], index: Int) {
        let target = targets[(index + attacker.sent) % targets.count]
        attacker.sent += 1
        attacker.nextAt = 0
        send([.login(account: target, password: "wrong \(attacker.sent)")], on: attacker.descriptor)
    }

    private static func send(_ frames: [Frame], on descriptor: Int32) {
        let bytes = frames.flatMap { FrameEncoder.encode($0) }
        _ = bytes.withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// A blocking TCP connection from `source` to 127.0.0.1:`port` (sends of a few bytes never block).
    private static func connect(port: Int, from source: String) throws -> Int32 {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw POSIXError(.EMFILE) }
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        inet_pton(AF_INET, source, &local.sin_addr)
        var remote = sockaddr_in()
        remote.sin_family = sa_family_t(AF_INET)
        remote.sin_port = in_port_t(UInt16(port).bigEndian)
        inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr)
        let size = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, size) } }
        let connected = withUnsafePointer(to: &remote) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(descriptor, $0, size) } }
        guard bound == 0, connected == 0 else {
            let code = errno
            close(descriptor)
            throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
        }
        return descriptor
    }
}
