/// Decides which of many similar log lines to write, so that a client in a reconnect loop cannot
/// fill the disk: per key (say, an address and a refusal), the first `burst` lines of each
/// `window` are written, the rest only counted, and the count is written once the window ends.
///
/// Plain arithmetic on times passed in (uptime milliseconds), tested without a clock. Keys seen in
/// a window cost one dictionary entry until the window ends.
struct LogThrottle: Sendable {
    /// Lines written per key and window.
    let burst: Int
    /// The window, in milliseconds.
    let window: UInt64
    private var keys: [String: Tally] = [:]

    private struct Tally: Sendable {
        var windowStart: UInt64
        var written = 0
        var suppressed = 0
    }

    /// Writes `burst` lines per key in each `window` of milliseconds.
    init(burst: Int = 5, window: UInt64 = 10_000) {
        self.burst = burst
        self.window = window
    }

    /// Whether to write a line for `key` at `now`; when not, it is counted for `summaries`.
    mutating func admit(_ key: String, now: UInt64) -> Bool {
        var tally = keys[key] ?? Tally(windowStart: now)
        defer { keys[key] = tally }
        if tally.written < burst {
            tally.written += 1
            return true
        }
        tally.suppressed += 1
        return false
    }

    /// The keys whose window has ended with lines suppressed, with how many; forgets every key
    /// whose window has ended.
    mutating func summaries(now: UInt64) -> [(key: String, suppressed: Int)] {
        var ended: [(key: String, suppressed: Int)] = []
        keys = keys.filter { key, tally in
            guard now &- tally.windowStart >= window else { return true }
            if tally.suppressed > 0 { ended.append((key, tally.suppressed)) }
            return false
        }
        return ended.sorted { $0.key < $1.key }
    }
}
