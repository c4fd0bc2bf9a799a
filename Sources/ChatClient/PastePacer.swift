/// Paces what the client sends so that it stays under the server's rate limits, so a long
/// paste is delayed instead of dropped.
///
/// The server meters each client with token buckets (requests, and bytes) that start full
/// and refill at a steady rate; a frame that finds its bucket empty is dropped with
/// `rateLimited`. The pacer keeps its own copy of each bucket with half the server's burst
/// (rounded down, at least 1) and 80 % of its rate, and is told of every frame sent. So its
/// buckets never hold more than the server's minus half a burst: whenever the pacer lets a
/// frame go, the server's bucket has room for it, even if half the burst was already spent in
/// ways the pacer did not see.
public struct PastePacer: Sendable {
    private var requests: Bucket
    private var bytes: Bucket

    /// A pacer for `limits`, starting at `now` (any monotonic clock, as a duration).
    public init(limits: RateLimits, now: Duration) {
        requests = Bucket(rate: limits.requestsPerSecond * 0.8, capacity: Double(max(1, limits.requestBurst / 2)), now: now)
        bytes = Bucket(rate: limits.bytesPerSecond * 0.8, capacity: Double(max(1, limits.byteBurst / 2)), now: now)
    }

    /// How long to wait, from `now`, before a frame of `size` bytes may go; zero when it may go
    /// at once.
    public mutating func delay(forFrameOf size: Int, at now: Duration) -> Duration {
        max(requests.wait(for: 1, at: now), bytes.wait(for: Double(size), at: now))
    }

    /// Records a frame of `size` bytes sent at `now` (every frame, pasted or not).
    public mutating func record(frameOf size: Int, at now: Duration) {
        requests.take(1, at: now)
        bytes.take(Double(size), at: now)
    }

    /// A token bucket; a rate of 0 means no limit.
    private struct Bucket: Sendable {
        let rate: Double
        let capacity: Double
        var tokens: Double
        var updated: Duration

        init(rate: Double, capacity: Double, now: Duration) {
            self.rate = rate
            self.capacity = capacity
            tokens = capacity
            updated = now
        }

        mutating func refill(at now: Duration) {
            guard now > updated else { return }
            let elapsed = Double((now - updated).components.seconds) + Double((now - updated).components.attoseconds) / 1e18
            tokens = min(capacity, tokens + elapsed * rate)
            updated = now
        }

        mutating func wait(for amount: Double, at now: Duration) -> Duration {
            guard rate > 0 else { return .zero }
            refill(at: now)
            // A frame larger than the bucket waits for a full bucket, then goes.
            let needed = min(amount, capacity)
            guard tokens < needed else { return .zero }
            return .nanoseconds(Int64(((needed - tokens) / rate * 1e9).rounded(.up)))
        }

        mutating func take(_ amount: Double, at now: Duration) {
            guard rate > 0 else { return }
            refill(at: now)
            tokens -= amount
        }
    }
}
