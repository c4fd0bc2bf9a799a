import ChatProtocol

/// How the server divides `--max-memory` among what can grow, so that its resident memory stays
/// under the total whatever clients do.
///
/// Every part that grows with what clients send has a bound derived from the total:
///
/// | part | bound |
/// | --- | --- |
/// | the process itself: code, runtime, Dispatch, allocator arenas | `baseline` |
/// | a cluster node's Redis link: commands waiting for replies, replies being parsed | `clusterLink` |
/// | accounts: the password hashing workers' memory, their queue, the account records | `accounts` |
/// | connections: state, away text, and what a decoder may hold (a partial frame and one read) | `perConnection` × `maxClients` |
/// | room history (entries) | `history` in all |
/// | history replays encoded once and shared (at most two per room) | up to 2 × `history` |
/// | everything queued for clients (chunks counted once, however many queues share them) | `output` in all |
/// | frames encoded and held until the commit that makes them durable (durable mode), or, on a cluster node, frames of departed senders held for their recipients until the events before them come back | `held`, plus one request's replies |
/// | allocator slack and fragmentation | what is left (about an eighth) |
///
/// Past `output`, the clients that lag furthest behind are disconnected as slow consumers until
/// the queues fit again; a client that reads keeps up and is never the furthest behind for long.
public struct MemoryBudget: Sendable, Equatable, CustomStringConvertible {
    /// The total, `--max-memory`.
    public let total: Int
    /// What the process needs before any client connects, with room for its runtime's own growth.
    public let baseline: Int
    /// What a cluster node's Redis link may hold (0 when not a node).
    public let clusterLink: Int
    /// What accounts may cost (`AccountSettings.memoryReserve`): Argon2id's memory per hashing
    /// worker, the queued jobs and the records.
    public let accounts: Int
    /// The most one connection costs without its output queue: its state (about 2 KiB, measured),
    /// its away text, and a decoder holding a partial frame of the largest allowed size plus one
    /// read's worth of frames not yet served (`readBytes`).
    public let perConnection: Int
    /// The most room history (texts and names) kept in all rooms together.
    public let history: Int
    /// The most history one room keeps.
    public let historyPerRoom: Int
    /// The most that may be queued for all clients together.
    public let output: Int
    /// The most that frames held for a commit may cost before the server stops reading requests
    /// until the commit lands (a request being served when it is reached may add its replies).
    public let held: Int
    /// The most that may be queued for one client; a client past it is disconnected at once.
    public let outputPerClient: Int
    /// Above this much queued for it, a client's requests wait (its connection is not read) until
    /// its queue is back under `replyLowWater`: a client that does not read its replies cannot make
    /// the server produce more.
    public let replyHighWater: Int
    /// See `replyHighWater`.
    public let replyLowWater: Int
    /// A client whose queue stays above this for `slowConsumerTimeout` is a slow consumer.
    public let lagThreshold: Int

    /// The process's share: measured idle release server RSS is about 12 MiB; the rest is headroom
    /// for Dispatch threads' stacks and allocator arenas, and in durable mode for the journal's
    /// records waiting for SQLite (`SQLiteRoomStore.journalHoldBytes`, 4 MiB).
    public static let baselineBytes = 40 << 20

    /// What a connection's state costs: `ClientConnection`, its channel, socket and chat state;
    /// 1.9–2.7 KiB measured, rounded up.
    public static let connectionStateBytes = 3 << 10

    /// The longest away text kept for a client, in UTF-8 bytes; a longer one is cut to it.
    public static let awayTextBytes = 512

    /// What the server reads from one connection at a time. Reads stop while a client's requests
    /// wait, so a waiting connection's decoder holds at most a partial frame and one read: small
    /// reads keep that share small (a read still carries a hundred chat frames), where reads of
    /// 64 KiB made every connection's share four frames' worth.
    public static let readBytes = 4 << 10

    /// The smallest total that leaves the growing parts room to work.
    public static let minimumRemainder = 16 << 20

    /// Divides `total` for a server of `maxClients` connections accepting frames up to
    /// `maxFrameSize` bytes; `extraPerConnection` adds what a connection's transport costs (TLS
    /// state, say); `clusterLink` reserves what a cluster node's Redis link may hold.
    public init(total: Int, maxClients: Int, maxFrameSize: Int, extraPerConnection: Int = 0, clusterLink: Int = 0, accounts: Int = 0) {
        self.total = total
        baseline = Self.baselineBytes
        self.clusterLink = clusterLink
        self.accounts = accounts
        perConnection =
            Self.connectionStateBytes + Self.awayTextBytes + maxFrameSize + WireProtocol.maxVarintLength + Self.readBytes
            + extraPerConnection
        remainder = total - baseline - clusterLink - accounts - perConnection * maxClients
        let usable = max(0, remainder)
        history = usable / 8
        historyPerRoom = max(64 << 10, history / 16)
        // Output and held frames share half, held taking an eighth of it: held frames wait for a
        // commit only, a few milliseconds when the disk keeps up.
        held = usable / 16
        output = usable / 2 - held
        outputPerClient = max(8 << 20, output / 8)
        replyHighWater = 256 << 10
        replyLowWater = 64 << 10
        lagThreshold = replyHighWater
    }

    /// What is left for the parts that grow, after the process and the connections.
    public let remainder: Int

    /// Why the total is too small for the connections it must hold, or nil.
    public var problem: String? {
        guard remainder < Self.minimumRemainder else { return nil }
        let link = (clusterLink > 0 ? ", its cluster link \(Self.mebibytes(clusterLink))," : "")
            + (accounts > 0 ? (clusterLink > 0 ? " " : ", ") + "its accounts \(Self.mebibytes(accounts))," : "")
        return "--max-memory \(Self.mebibytes(total)) is too small: the process needs \(Self.mebibytes(baseline))\(link) and "
            + "each of --max-clients connections up to \(Self.kibibytes(perConnection)), which leaves "
            + "\(Self.mebibytes(max(0, remainder))) of the \(Self.mebibytes(Self.minimumRemainder)) needed for history and "
            + "output; raise --max-memory, or lower --max-clients or --max-frame-size"
    }

    /// The parts, for the start-up log line and --help.
    public var description: String {
        "max-memory \(Self.mebibytes(total)): process \(Self.mebibytes(baseline)), "
            + (clusterLink > 0 ? "cluster link \(Self.mebibytes(clusterLink)), " : "")
            + (accounts > 0 ? "accounts \(Self.mebibytes(accounts)), " : "")
            + "\(Self.kibibytes(perConnection)) per connection, history \(Self.mebibytes(history)) "
            + "(\(Self.kibibytes(historyPerRoom)) per room), output \(Self.mebibytes(output)) "
            + "(\(Self.mebibytes(outputPerClient)) per client)"
    }

    static func mebibytes(_ bytes: Int) -> String { "\(bytes >> 20) MiB" }
    static func kibibytes(_ bytes: Int) -> String { "\(bytes >> 10) KiB" }
}
