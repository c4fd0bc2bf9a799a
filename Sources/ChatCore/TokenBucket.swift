/// A token bucket: allows `rate` tokens per second on average and `burst` at once.
///
/// Time comes in as a parameter (milliseconds on a monotonic clock), so the limiter is plain
/// arithmetic and tests need no clock.
package struct TokenBucket: Sendable {
    private var tokens: Double
    private var lastRefill: UInt64

    /// A full bucket as of `now`.
    package init(burst: Int, now: UInt64) {
        tokens = Double(burst)
        lastRefill = now
    }

    /// Whether `count` tokens are there, after refilling for the time passed since the last call.
    package mutating func has(_ count: Double, rate: Double, burst: Int, now: UInt64) -> Bool {
        if now > lastRefill {
            tokens = min(Double(burst), tokens + Double(now - lastRefill) * rate / 1000)
            lastRefill = now
        }
        return tokens >= count
    }

    /// Takes `count` tokens: after `has` said they are there, or into debt, which
    /// `millisecondsUntilSolvent` then makes the spender wait out.
    package mutating func spend(_ count: Double) {
        tokens -= count
    }

    /// How long, after refilling for the time passed, until the bucket holds more than nothing:
    /// 0 when it already does.
    package mutating func millisecondsUntilSolvent(rate: Double, burst: Int, now: UInt64) -> UInt64 {
        guard !has(Double.leastNonzeroMagnitude, rate: rate, burst: burst, now: now) else { return 0 }
        return UInt64((-tokens * 1000 / rate).rounded(.up)) + 1
    }
}
