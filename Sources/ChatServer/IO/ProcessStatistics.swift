import ChatStorage
import Glibc

/// The process's CPU time, memory and descriptors, read from `/proc/self` when asked (at scrape
/// time, on the metrics port's queue): nothing is sampled in between, so they cost the chat nothing.
public struct ProcessStatistics: Sendable, Equatable {
    /// User and system CPU time used, in seconds.
    public var cpuSeconds: Double
    /// Resident set size, in bytes.
    public var residentBytes: Int
    /// Virtual memory size, in bytes.
    public var virtualBytes: Int
    /// Open file descriptors.
    public var openDescriptors: Int
    /// The soft limit on open descriptors.
    public var maxDescriptors: Int
    /// When the process started, in seconds since the Unix epoch.
    public var startTimeSeconds: Double

    /// Reads the statistics of this process; nil where `/proc` is not mounted.
    public static func current() -> ProcessStatistics? {
        guard let stat = readFile("/proc/self/stat"),
            // The command name in parentheses may hold spaces: fields are counted after its ")".
            let close = stat.lastIndex(of: UInt8(ascii: ")"))
        else { return nil }
        let fields = stat[(close + 1)...].split(separator: UInt8(ascii: " ")).map { String(decoding: $0, as: UTF8.self) }
        // After ")": field 3 (state) is index 0, so field N is index N - 3.
        func field(_ number: Int) -> Double { fields.indices.contains(number - 3) ? Double(fields[number - 3]) ?? 0 : 0 }
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        let page = Double(sysconf(Int32(_SC_PAGESIZE)))
        var limit = rlimit()
        getrlimit(RLIMIT_NOFILE_CONSTANT, &limit)
        return ProcessStatistics(
            cpuSeconds: (field(14) + field(15)) / ticks, residentBytes: Int(field(24) * page), virtualBytes: Int(field(23)),
            openDescriptors: countDescriptors(), maxDescriptors: Int(limit.rlim_cur),
            startTimeSeconds: bootTime() + field(22) / ticks)
    }

    private static let RLIMIT_NOFILE_CONSTANT = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)

    /// Entries of `/proc/self/fd`, less the one `opendir` itself holds.
    private static func countDescriptors() -> Int {
        max(0, (DirectoryEntries.names(in: "/proc/self/fd")?.count ?? 1) - 1)
    }

    /// The system's boot time, seconds since the epoch (`btime` in `/proc/stat`).
    private static func bootTime() -> Double {
        guard let stat = readFile("/proc/stat") else { return 0 }
        for line in stat.split(separator: UInt8(ascii: "\n")) where line.starts(with: Array("btime ".utf8)) {
            return Double(String(decoding: line.dropFirst(6), as: UTF8.self)) ?? 0
        }
        return 0
    }

    /// A small `/proc` file's contents (read to end of file), or nil.
    private static func readFile(_ path: String) -> [UInt8]? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var contents: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { break }
            contents += chunk[0..<count]
        }
        return contents
    }
}
