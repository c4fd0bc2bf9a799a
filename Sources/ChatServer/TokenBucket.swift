/// A token bucket: allows `rate` events per second on average and `burst` at once.
///
/// Time comes in as a parameter (milliseconds on a monotonic clock), so the limiter is plain
/// arithmetic and tests need no clock.
struct TokenBucket: Sendable {
    private var tokens: Double
    private var lastRefill: UInt64

    /// A full bucket as of `now`.
    init(burst: Int, now: UInt64) {
        tokens = Double(burst)
        lastRefill = now
    }

    /// Takes one token if there is one; refills first for the time passed since the last call.
    mutating func take(rate: Double, burst: Int, now: UInt64) -> Bool {
        if now > lastRefill {
            tokens = min(Double(burst), tokens + Double(now - lastRefill) * rate / 1000)
            lastRefill = now
        }
        guard tokens >= 1 else { return false }
        tokens -= 1
        return true
    }
}
