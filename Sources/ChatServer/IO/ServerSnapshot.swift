import RoomLog

/// What a running server looks like at one moment: the numbers behind `/metrics`'s gauges and
/// the status page (`ChatServer.snapshot`). Taken on the server's queue, at most once a second.
public struct ServerSnapshot: Sendable {
    /// How the server keeps its rooms.
    public enum Mode: String, Sendable {
        /// `--no-persistence`: in memory only.
        case memory
        /// Rooms in SQLite under the data directory (the default).
        case durable
        /// A node of a cluster sharing a Redis.
        case cluster
    }

    /// Connections by where they are in their life, as labelled in `chat_connections{state}`.
    public struct Connections: Sendable {
        /// TLS connections whose TLS handshake has not completed.
        public var tlsHandshake = 0
        /// Connections that have not been welcomed (no `hello` answered yet).
        public var hello = 0
        /// Welcomed clients.
        public var chatting = 0
        /// Connections being closed (their farewell queued, waiting for the peer or a deadline).
        public var closing = 0
        /// Plain connections refused at the door that wait, without a channel, for their client
        /// to close (a refused TLS connection is a channel and counts as `closing`).
        public var refused = 0

        /// Every state with its count, in a fixed order.
        public var byState: [(String, Int)] {
            [("tls_handshake", tlsHandshake), ("hello", hello), ("chatting", chatting), ("closing", closing), ("refused", refused)]
        }
    }

    /// A room on the status page: its name (never a metric label), members and recent traffic.
    public struct Room: Sendable {
        /// The room's name.
        public var name: String
        /// Members on this server.
        public var members: Int
        /// Events per second since the previous snapshot.
        public var eventsPerSecond: Double
        /// The `seq` of its latest event (on a cluster node, the latest delivered here).
        public var lastSeq: UInt64
    }

    /// The memory budget's parts (`--max-memory`) and how much of each is in use.
    public struct Budget: Sendable {
        /// `--max-memory`.
        public var total = 0
        /// What the output queues pin now (frames held for a commit included).
        public var outputQueued = 0
        /// Each part's bound, by `chat_memory_budget_bytes{part}` label.
        public var limits: [(String, Int)] = []
        /// What each growing part uses now, by `chat_memory_used_bytes{part}` label.
        public var used: [(String, Int)] = []
    }

    /// The durable mode's store.
    public struct Storage: Sendable {
        /// The database file.
        public var databasePath: String
        /// Why the last commit failed, while commits fail; nil when they work.
        public var failure: String?
        /// Each written part of the data directory: its failed writes, and why it fails now.
        public var parts: [StorageHealth.Report] = []
        /// Bytes of journal records the database has not taken in yet.
        public var journalBacklogBytes = 0
        /// Journal records waiting for the next hand-off.
        public var journalBacklogRecords = 0
        /// Where the journal's files are (the locked directory itself), counted at request time.
        public var journalDirectory: String?

        /// Why the store is unhealthy now, a sentence per failing part; empty when it is healthy.
        public var problems: [String] {
            var problems = parts.compactMap { report in report.failing.map { "\(report.part.rawValue): \($0)" } }
            if problems.isEmpty, let failure { problems.append("commits: \(failure)") }
            return problems
        }
    }

    /// A cluster node's link to its Redis.
    public struct Cluster: Sendable {
        /// This node's id.
        public var nodeID: String
        /// Whether both Redis connections are up.
        public var linkUp: Bool
        /// Why it is down, when it is.
        public var linkProblem: String?
    }

    /// Seconds since the server started.
    public var uptimeSeconds: Double
    /// How the rooms are kept.
    public var mode: Mode
    /// Open connections by state.
    public var connections: Connections
    /// Connections accepted since start (refusals at the door not counted).
    public var connectionsAccepted: Int
    /// Rooms in memory (with a cluster: rooms this node's clients are in).
    public var rooms: Int
    /// Memberships: clients in rooms, counted once per room.
    public var memberships: Int
    /// The rooms with the most members, most first (at most `topRooms`).
    public var busiestRooms: [Room]
    /// The rooms with the most events per second since the previous snapshot, most first.
    public var liveliestRooms: [Room]
    /// The memory budget and its use.
    public var budget: Budget
    /// The store, in durable mode.
    public var storage: Storage?
    /// The cluster link, in cluster mode.
    public var cluster: Cluster?
    /// The latency histograms kept on the loop (`chat_delivery_latency_seconds`,
    /// `chat_event_loop_lag_seconds`), while metrics are recorded; empty otherwise.
    public var histograms: [LatencyHistogram] = []

    /// Why the server cannot serve the chat as it should now, a sentence each: a failing store,
    /// a cluster link that is down. Empty when healthy: `/healthz` answers 200 then, 503 otherwise.
    public var problems: [String] {
        var problems = storage?.problems.map { "storage failing: \($0)" } ?? []
        if let cluster, !cluster.linkUp { problems.append("cluster link to Redis down: \(cluster.linkProblem ?? "connecting")") }
        return problems
    }

    /// How many rooms each list on the status page shows.
    public static let topRooms = 5
}

/// The `ServerSnapshot.topRooms` largest rooms by some measure, kept in one pass over all rooms.
struct TopRooms {
    /// The rooms kept, largest first.
    private(set) var rooms: [ServerSnapshot.Room] = []
    private let measure: (ServerSnapshot.Room) -> Double

    init(by measure: @escaping (ServerSnapshot.Room) -> Double) { self.measure = measure }

    /// Keeps `room` if it is among the largest seen so far.
    mutating func offer(_ room: ServerSnapshot.Room) {
        let value = measure(room)
        if rooms.count == ServerSnapshot.topRooms, let last = rooms.last, measure(last) >= value { return }
        let index = rooms.firstIndex { measure($0) < value } ?? rooms.count
        rooms.insert(room, at: index)
        if rooms.count > ServerSnapshot.topRooms { rooms.removeLast() }
    }
}
