/// A Prometheus histogram kept as plain integers on the server's queue: bucket counts, a count
/// and a sum, recorded with a few comparisons and adds and rendered in the text format.
///
/// Why not swift-metrics' `Timer`: a sample there takes a lock (swift-prometheus's histogram), and
/// the delivery-latency histogram records a sample per client flushed, thousands a second on a
/// busy server, on the event loop. swift-metrics has no call that adds many samples at once, so
/// these two histograms (`chat_delivery_latency_seconds`, `chat_event_loop_lag_seconds`) are
/// copied into each snapshot and rendered by `OperatorView` beside the registry's text; an
/// embedding program that bootstraps another backend does not get them.
public struct LatencyHistogram: Sendable {
    /// The metric's name (`_bucket`, `_sum`, `_count` are added).
    public let name: String
    /// The buckets' upper bounds in nanoseconds, ascending (`+Inf` is implicit).
    public let bounds: [UInt64]
    /// Samples per bucket (not cumulative; the last is past every bound).
    public private(set) var counts: [Int]
    /// Samples recorded.
    public private(set) var count = 0
    /// The samples' sum, in nanoseconds.
    public private(set) var sumNanoseconds: UInt64 = 0

    /// An empty histogram named `name` with `bounds` (ascending).
    public init(name: String, bounds: [Duration]) {
        self.name = name
        self.bounds = bounds.map { UInt64($0 / .nanoseconds(1)) }
        counts = [Int](repeating: 0, count: bounds.count + 1)
    }

    /// Records `samples` samples of `nanoseconds` each (one by default).
    @inline(__always)
    public mutating func record(nanoseconds: UInt64, samples: Int = 1) {
        guard samples > 0 else { return }
        var index = 0
        while index < bounds.count, nanoseconds > bounds[index] { index += 1 }
        counts[index] += samples
        count += samples
        sumNanoseconds &+= nanoseconds &* UInt64(samples)
    }

    /// The histogram in Prometheus's text format (HELP and TYPE first), seconds as the unit.
    public func exposition(help: String) -> String {
        var text = "# HELP \(name) \(help)\n# TYPE \(name) histogram\n"
        var cumulative = 0
        for (index, bound) in bounds.enumerated() {
            cumulative += counts[index]
            text += "\(name)_bucket{le=\"\(Self.seconds(bound))\"} \(cumulative)\n"
        }
        text += "\(name)_bucket{le=\"+Inf\"} \(count)\n"
        text += "\(name)_sum \(Self.seconds(sumNanoseconds))\n"
        text += "\(name)_count \(count)\n"
        return text
    }

    /// `nanoseconds` as seconds, without a float's noise for the bounds (0.000025, not 2.5e-05).
    static func seconds(_ nanoseconds: UInt64) -> String {
        let whole = nanoseconds / 1_000_000_000
        var fraction = String(nanoseconds % 1_000_000_000)
        fraction = String(repeating: "0", count: 9 - fraction.count) + fraction
        while fraction.last == "0" { fraction.removeLast() }
        return fraction.isEmpty ? "\(whole)" : "\(whole).\(fraction)"
    }

    /// The bounds both histograms use: 25 µs to 2.5 s, about three per decade.
    public static let latencyBounds: [Duration] = [
        .microseconds(25), .microseconds(50), .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1),
        .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100),
        .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2500),
    ]
}
