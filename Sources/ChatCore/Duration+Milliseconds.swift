extension Duration {
    /// The duration in whole milliseconds, rounded down: the core's clock is milliseconds on a
    /// monotonic clock, and its limits and timeouts are configured as `Duration`s.
    package var milliseconds: UInt64 {
        let (seconds, attoseconds) = components
        return UInt64(max(0, seconds)) * 1000 + UInt64(max(0, attoseconds)) / 1_000_000_000_000_000
    }
}
