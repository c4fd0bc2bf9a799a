import SocketCore

/// Which server to try next, and when: the servers in the order given, round robin, with the
/// reconnection backoff paid once per full round rather than once per server.
///
/// The client starts with the first server. When a connection attempt fails or a session ends,
/// it goes on to the next server at once — a dead node among live ones costs one refused
/// connect, not a delay — until every server has failed once since the last wait; then it waits
/// the backoff's delay for the round and starts the next round where the list goes on. A
/// session that settled (the server answered a request) or stayed up for the backoff's
/// `stableAfter` starts a fresh round and resets the delays, as it does for a single server; a
/// session that did neither counts as a failure of its server, so servers that welcome and drop
/// at once are not redialled in a tight loop. With one server this is exactly
/// `ReconnectBackoff`: a wait after every failure.
///
/// A value with no clock and no I/O; the driver owns it.
public struct ServerRotation: Sendable {
    /// What to do after a failure.
    public enum Next: Sendable, Equatable {
        /// Try `server` at once: another server of this round is left.
        case tryNow(ServerAddress)
        /// Every server failed this round: wait the backoff's delay for `attempt`, then try `server`.
        case wait(attempt: Int, then: ServerAddress)
    }

    /// Every server, in the order given; never empty.
    public let servers: [ServerAddress]
    /// The policy for the waits between rounds.
    public let backoff: ReconnectBackoff
    /// The server to try now, or the one the last session was on.
    public var current: ServerAddress { servers[index] }

    private var index = 0
    /// Servers that failed since the last wait (or the last stable session).
    private var failedThisRound = 0
    /// Rounds that failed in a row: the backoff's attempt number for the last wait.
    private var attempt = 0

    /// A rotation over `servers` (at least one), starting with the first.
    public init(servers: [ServerAddress], backoff: ReconnectBackoff) {
        precondition(!servers.isEmpty, "a rotation needs a server")
        self.servers = servers
        self.backoff = backoff
    }

    /// The current server failed: the connection attempt did not end in a welcome
    /// (`sessionLasted` nil), or a session that lasted `sessionLasted` ended, `settled` when the
    /// server had answered one of its requests. Moves on to the next server and says whether
    /// to try it now or after a wait.
    public mutating func failed(sessionLasted: Duration?, settled: Bool = false) -> Next {
        if backoff.startsAgain(sessionLasted: sessionLasted, settled: settled) {
            failedThisRound = 0
            attempt = 0
        }
        failedThisRound += 1
        index = (index + 1) % servers.count
        guard failedThisRound >= servers.count else { return .tryNow(current) }
        failedThisRound = 0
        attempt += 1
        return .wait(attempt: attempt, then: current)
    }
}
