import Dispatch
import Glibc

/// An IPv4 or IPv6 socket address (`sockaddr_in` / `sockaddr_in6`) as a value.
///
/// Prints as `127.0.0.1:7000` or `[::1]:7000`.
public struct SocketAddress: Sendable, Hashable, CustomStringConvertible {
    /// The raw `sockaddr` bytes, exactly `socklen` long.
    private let bytes: [UInt8]

    /// Copies a `sockaddr` of `length` bytes.
    public init(_ address: UnsafePointer<sockaddr>, length: socklen_t) {
        bytes = Array(UnsafeRawBufferPointer(start: address, count: Int(length)))
    }

    /// The ports TCP has.
    public static let validPorts = 0...65535

    /// Parses a numeric IPv4 or IPv6 address (no name lookup), e.g. `SocketAddress(ip: "::1", port: 7000)`;
    /// nil when `ip` is not one or `port` is outside `validPorts`.
    public init?(ip: String, port: Int) {
        guard Self.validPorts.contains(port) else { return nil }
        var v4 = sockaddr_in()
        if inet_pton(AF_INET, ip, &v4.sin_addr) == 1 {
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = in_port_t(UInt16(truncatingIfNeeded: port)).bigEndian
            bytes = withUnsafeBytes(of: &v4) { Array($0) }
            return
        }
        var v6 = sockaddr_in6()
        if inet_pton(AF_INET6, ip, &v6.sin6_addr) == 1 {
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = in_port_t(UInt16(truncatingIfNeeded: port)).bigEndian
            bytes = withUnsafeBytes(of: &v6) { Array($0) }
            return
        }
        return nil
    }

    /// `AF_INET` or `AF_INET6`.
    public var family: Int32 {
        withSockaddr { address, _ in Int32(address.pointee.sa_family) }
    }

    /// The port in host byte order.
    public var port: Int {
        withSockaddr { address, _ in
            address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { v4 in
                // sin_port and sin6_port sit at the same offset, right after the family.
                Int(UInt16(bigEndian: v4.pointee.sin_port))
            }
        }
    }

    /// The numeric host part, e.g. `127.0.0.1` or `::1`.
    public var ip: String {
        withSockaddr { address, _ in
            var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
            if address.pointee.sa_family == sa_family_t(AF_INET6) {
                address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { v6 in
                    var raw = v6.pointee.sin6_addr
                    _ = inet_ntop(AF_INET6, &raw, &text, socklen_t(text.count))
                }
            } else {
                address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { v4 in
                    var raw = v4.pointee.sin_addr
                    _ = inet_ntop(AF_INET, &raw, &text, socklen_t(text.count))
                }
            }
            return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
    }

    /// `127.0.0.1:7000` or `[::1]:7000`.
    public var description: String {
        family == AF_INET6 ? "[\(ip)]:\(port)" : "\(ip):\(port)"
    }

    /// Calls `body` with the address as a `sockaddr` pointer and its length, for system calls.
    public func withSockaddr<R, E: Error>(_ body: (UnsafePointer<sockaddr>, socklen_t) throws(E) -> R) throws(E) -> R {
        // Array.withUnsafeBytes only rethrows untyped errors, so carry the typed one out in a Result.
        let result = bytes.withUnsafeBytes { raw in
            Result { () throws(E) -> R in
                try body(raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t(raw.count))
            }
        }
        return try result.get()
    }
}

/// Name resolution with `getaddrinfo`, IPv4 and IPv6.
public enum Resolver {
    /// Resolves `host` (a name or a numeric address) to the stream-socket addresses for `port`,
    /// in the order `getaddrinfo` prefers them, without duplicates.
    ///
    /// Blocks while the system resolver works; call it off any latency-sensitive queue, or use
    /// `resolveInBackground`. A port outside `SocketAddress.validPorts` fails with `EINVAL` before any
    /// lookup (`getaddrinfo` itself would truncate 70000 to 4464).
    /// - Parameter passive: resolve for `bind` (an empty host then means every local address).
    public static func resolve(host: String, port: Int, passive: Bool = false) throws(SocketError) -> [SocketAddress] {
        let target = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        guard SocketAddress.validPorts.contains(port) else {
            throw SocketError(.posix(EINVAL), operation: "resolve", target: target, detail: "port \(port) is outside 0…65535")
        }
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0)
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host.isEmpty ? nil : host, String(port), &hints, &list)
        guard status == 0 else {
            if status == EAI_SYSTEM { throw SocketError.lastErrno("resolve", target: target) }
            throw SocketError(.resolver(status), operation: "resolve", target: target)
        }
        defer { freeaddrinfo(list) }
        var addresses: [SocketAddress] = []
        var cursor = list
        while let entry = cursor {
            if let address = entry.pointee.ai_addr,
               entry.pointee.ai_family == AF_INET || entry.pointee.ai_family == AF_INET6 {
                let resolved = SocketAddress(address, length: entry.pointee.ai_addrlen)
                if !addresses.contains(resolved) { addresses.append(resolved) }
            }
            cursor = entry.pointee.ai_next
        }
        if addresses.isEmpty { throw SocketError(.resolver(EAI_NONAME), operation: "resolve", target: target) }
        return addresses
    }
}

extension Resolver {
    /// Resolves like `resolve(host:port:passive:)` on the resolver's own threads and hands the
    /// result to `completion` there.
    ///
    /// `getaddrinfo` blocks a thread for as long as the lookup takes. Run on Dispatch's global
    /// queues, every lookup in flight held a worker thread and Dispatch kept adding workers: 300
    /// streams opening at once raised a process to several hundred threads. Here lookups queue for
    /// a fixed pool (`lookupThreads` serial queues), so they cost at most that many threads however
    /// many are pending.
    public static func resolveInBackground(
        host: String, port: Int, completion: @escaping @Sendable (Result<[SocketAddress], SocketError>) -> Void
    ) {
        lookupQueues.next().async {
            completion(Result { () throws(SocketError) in try resolve(host: host, port: port) })
        }
    }

    /// How many lookups run at once: enough that one slow DNS answer does not hold up the rest.
    public static let lookupThreads = 4

    private static let lookupQueues = QueueRing(label: "SocketCore.resolver", count: lookupThreads)
}
