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
    /// How many descriptors the process has open (entries of /proc/self/fd), or nil where that
    /// directory does not exist. Used to check that nothing leaks across a server's life.
    public static func openDescriptorCount() -> Int? {
        guard let directory = opendir("/proc/self/fd") else { return nil }
        defer { closedir(directory) }
        var count = 0
        while let entry = readdir(directory) {
            if entry.pointee.d_name.0 != UInt8(ascii: ".") { count += 1 }
        }
        // The directory stream itself holds one while we count.
        return count - 1
    }
}
