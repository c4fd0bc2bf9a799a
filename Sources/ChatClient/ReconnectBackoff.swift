/// How long to wait before each reconnection attempt: exponential backoff with jitter.
///
/// Attempt 1 waits about `initial`, each later attempt twice as long, up to `maximum`. The
/// actual delay is drawn between half and all of that ("equal jitter"), so that clients cut
/// off together by a server restart do not all come back in the same instant, while each
/// still waits at least half the nominal delay.
///
/// The delays start again from `initial` once a session has settled — the server answered one
/// of its requests (the rejoins) — or stayed up for `stableAfter`: a server that is back after a
/// long outage is not left waiting out the longest delay at its next restart, while one that
/// welcomes and drops at once is not redialled at the shortest delay forever.
public struct ReconnectBackoff: Sendable, Equatable {
    /// The nominal delay before the first attempt.
    public var initial: Duration
    /// The longest nominal delay.
    public var maximum: Duration
    /// How long a session must last before the next loss counts as a first failure again.
    public var stableAfter: Duration

    /// A policy from `initial` doubling up to `maximum`, reset by a session of `stableAfter`.
    public init(initial: Duration = .milliseconds(500), maximum: Duration = .seconds(30), stableAfter: Duration = .seconds(60)) {
        self.initial = initial
        self.maximum = maximum
        self.stableAfter = stableAfter
    }

    /// The attempt number for the next reconnection, after attempt `previous` (0 before any)
    /// led to a session that lasted `sessionLasted` (nil: no session, the attempt failed), in
    /// which the server answered a request (`settled`) or not.
    public func nextAttempt(after previous: Int, sessionLasted: Duration?, settled: Bool = false) -> Int {
        if startsAgain(sessionLasted: sessionLasted, settled: settled) { return 1 }
        return previous + 1
    }

    /// Whether a session that lasted `sessionLasted` (nil: none) starts the delays again.
    public func startsAgain(sessionLasted: Duration?, settled: Bool) -> Bool {
        guard let sessionLasted else { return false }
        return settled || sessionLasted >= stableAfter
    }

    /// The nominal delay before attempt `attempt` (1 for the first), before jitter.
    public func nominalDelay(attempt: Int) -> Duration {
        var delay = initial
        var step = 1
        while step < attempt, delay < maximum {
            delay *= 2
            step += 1
        }
        return min(delay, maximum)
    }

    /// The delay before attempt `attempt`, between half and all of the nominal delay.
    public func delay(attempt: Int, using generator: inout some RandomNumberGenerator) -> Duration {
        let nominal = nominalDelay(attempt: attempt)
        let fraction = Double.random(in: 0.5...1.0, using: &generator)
        return nominal * fraction
    }

    /// The delay before attempt `attempt`, with the system's random numbers.
    public func delay(attempt: Int) -> Duration {
        var generator = SystemRandomNumberGenerator()
        return delay(attempt: attempt, using: &generator)
    }
}
