import ChatStorage
import Glibc

/// The process's limit on open descriptors (`RLIMIT_NOFILE`), which caps how many clients a
/// server can hold.
public enum DescriptorLimit {
    /// Raises the soft limit to the hard limit and returns both the old and the new soft limit.
    /// Returns nil if the limit could not be read or changed.
    @discardableResult
    public static func raiseToHardLimit() -> (previous: UInt64, current: UInt64)? {
        var limit = rlimit()
        guard getrlimit(resource, &limit) == 0 else { return nil }
        let previous = UInt64(limit.rlim_cur)
        guard limit.rlim_cur < limit.rlim_max else { return (previous, previous) }
        limit.rlim_cur = limit.rlim_max
        guard setrlimit(resource, &limit) == 0 else { return nil }
        return (previous, UInt64(limit.rlim_cur))
    }

    /// The current soft limit, or nil if it cannot be read.
    public static var current: UInt64? {
        var limit = rlimit()
        guard getrlimit(resource, &limit) == 0 else { return nil }
        return UInt64(limit.rlim_cur)
    }

    private static var resource: __rlimit_resource_t { __rlimit_resource_t(RLIMIT_NOFILE.rawValue) }
}

extension DescriptorLimit {
    /// How many descriptors the process has open (entries of /proc/self/fd, less the one
    /// reading it), or nil where that directory does not exist.
    public static func openDescriptorCount() -> Int? {
        DirectoryEntries.names(in: "/proc/self/fd").map { $0.count - 1 }
    }

    /// How many sockets the process has open (entries of /proc/self/fd that link to `socket:`), or
    /// nil where that directory does not exist. A server that has shut down should have none.
    public static func openSocketCount() -> Int? {
        guard let names = DirectoryEntries.names(in: "/proc/self/fd") else { return nil }
        var count = 0
        var target = [CChar](repeating: 0, count: 64)
        for name in names {
            let length = readlink("/proc/self/fd/" + name, &target, target.count - 1)
            guard length > 0 else { continue }
            let link = String(decoding: target[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if link.hasPrefix("socket:") { count += 1 }
        }
        return count
    }
}
