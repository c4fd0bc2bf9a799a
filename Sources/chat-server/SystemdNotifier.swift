import Dispatch
import Glibc

/// Tells systemd what the server is doing through the datagram socket it names in
/// `NOTIFY_SOCKET` (sd_notify's protocol, written here rather than linking libsystemd for one
/// `sendto`): `READY=1` once the server listens (the unit is `Type=notify`, so `systemctl start`
/// returns then, and units ordered after it start only then), `RELOADING=1` … `READY=1` around
/// a SIGHUP reload, `STOPPING=1` at shutdown, `STATUS=` lines for `systemctl status`, and
/// `WATCHDOG=1` from the event loop itself every half of `WATCHDOG_USEC` (`WatchdogSec=` in the
/// unit): a loop stuck in a turn stops the beats, and systemd restarts the server.
///
/// Nil outside systemd (no `NOTIFY_SOCKET`). Owns its socket's descriptor, closed in `deinit`.
/// `@unchecked Sendable`: `lastBeat` is used on the server's queue only (the loop monitor's
/// beat); the rest is immutable after `init`, and `sendto` on a datagram socket is thread-safe.
final class SystemdNotifier: @unchecked Sendable {
    private let descriptor: Int32
    private var address = sockaddr_un()
    private let addressLength: socklen_t
    /// Half of `WATCHDOG_USEC`, in nanoseconds, when systemd watches the server; nil otherwise.
    let watchdogBeat: UInt64?
    private var lastBeat: UInt64 = 0

    /// The notifier systemd asked for in the environment, or nil.
    static func fromEnvironment() -> SystemdNotifier? {
        guard let path = getenv("NOTIFY_SOCKET").map({ String(cString: $0) }), !path.isEmpty else { return nil }
        var watchdog: UInt64?
        if let text = getenv("WATCHDOG_USEC").map({ String(cString: $0) }), let micros = UInt64(text), micros > 0 {
            // WATCHDOG_PID, when set, names the process meant (not a child that inherited it).
            let pid = getenv("WATCHDOG_PID").map { String(cString: $0) }
            if pid == nil || pid == String(getpid()) { watchdog = micros * 1000 / 2 }
        }
        return SystemdNotifier(path: path, watchdogBeat: watchdog)
    }

    private init?(path: String, watchdogBeat: UInt64?) {
        // "@name" is a socket in the abstract namespace: a leading NUL byte instead of "@".
        var bytes = Array(path.utf8)
        if bytes.first == UInt8(ascii: "@") { bytes[0] = 0 }
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard bytes.count < capacity, bytes.first == 0 || bytes.first == UInt8(ascii: "/") else { return nil }
        let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return nil }
        self.descriptor = descriptor
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { path in
            for (index, byte) in bytes.enumerated() { path[index] = byte }
        }
        addressLength = socklen_t(MemoryLayout<sockaddr_un>.offset(of: \.sun_path)! + bytes.count + (bytes.first == 0 ? 0 : 1))
        self.watchdogBeat = watchdogBeat
    }

    deinit { close(descriptor) }

    /// Sends `state` (lines of `KEY=value`), as `sd_notify` would; a lost datagram is not retried.
    func notify(_ state: String) {
        var bytes = Array(state.utf8)
        var target = address
        _ = bytes.withUnsafeMutableBytes { buffer in
            withUnsafePointer(to: &target) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(descriptor, buffer.baseAddress, buffer.count, Int32(MSG_NOSIGNAL), $0, addressLength)
                }
            }
        }
    }

    /// The event loop's beat (on the server's queue): `WATCHDOG=1` when half the watchdog's
    /// interval has passed since the last.
    func beat() {
        guard let watchdogBeat else { return }
        let now = DispatchTime.now().uptimeNanoseconds
        guard now &- lastBeat >= watchdogBeat else { return }
        lastBeat = now
        notify("WATCHDOG=1")
    }

    /// `RELOADING=1` with the monotonic time systemd wants with it.
    func reloading() {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        notify("RELOADING=1\nMONOTONIC_USEC=\(UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1000)")
    }
}
