import Glibc

/// The monotonic clock every sender stamps and every receiver reads, in nanoseconds.
///
/// All clients of a run live in one process, so one monotonic clock makes latency exact without
/// synchronising clocks, and wall-clock steps (NTP) cannot distort it.
public enum MonotonicClock {
    /// Nanoseconds since an arbitrary fixed point (boot).
    public static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }
}

/// CPU time and memory of a process at one moment, read from /proc (Linux only).
public struct ProcessSample: Sendable, Hashable {
    /// User plus system CPU time so far, in seconds.
    public var cpuSeconds: Double
    /// Resident memory now, in bytes.
    public var residentBytes: Int
    /// The most resident memory the process ever had, in bytes.
    public var peakResidentBytes: Int

    /// Reads process `pid`'s /proc/PID/stat and /proc/PID/status; nil when the process is gone
    /// or /proc is unreadable.
    public static func read(pid: Int32) -> ProcessSample? {
        guard let stat = contents(of: "/proc/\(pid)/stat"), let status = contents(of: "/proc/\(pid)/status") else {
            return nil
        }
        // The command name (field 2) is in parentheses and may hold spaces: count fields after it.
        guard let close = stat.lastIndex(of: ")") else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // Fields 14 and 15 of stat (utime, stime) are the 12th and 13th after the name.
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        func kilobytes(_ key: String) -> Int? {
            guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix(key + ":") }) else { return nil }
            return line.split(separator: " ").dropFirst().first.flatMap { Int($0) }
        }
        guard let rss = kilobytes("VmRSS") else { return nil }
        return ProcessSample(cpuSeconds: (user + system) / ticks, residentBytes: rss * 1024, peakResidentBytes: (kilobytes("VmHWM") ?? rss) * 1024)
    }

    /// The sum over `pids` (the nodes of a cluster, say); nil when the list is empty or any of
    /// them cannot be read.
    public static func read(pids: [Int32]) -> ProcessSample? {
        guard !pids.isEmpty else { return nil }
        var total = ProcessSample(cpuSeconds: 0, residentBytes: 0, peakResidentBytes: 0)
        for pid in pids {
            guard let sample = read(pid: pid) else { return nil }
            total.cpuSeconds += sample.cpuSeconds
            total.residentBytes += sample.residentBytes
            total.peakResidentBytes += sample.peakResidentBytes
        }
        return total
    }

    /// This process's own CPU time (from getrusage) and memory.
    public static func current() -> ProcessSample {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1_000_000 }
        let sample = read(pid: getpid())
        return ProcessSample(
            cpuSeconds: seconds(usage.ru_utime) + seconds(usage.ru_stime),
            residentBytes: sample?.residentBytes ?? 0, peakResidentBytes: Int(usage.ru_maxrss) * 1024)
    }

    /// Reads a small text file whole with plain POSIX calls (/proc files report size 0).
    private static func contents(of path: String) -> String? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { break }
            bytes.append(contentsOf: chunk[0..<count])
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
