import RedisProtocol

/// How much a node asks of Redis in one command, and so what its connections accept (docs/CLUSTER.md).
///
/// Every read that could grow with the cluster is paged: a room's log by `eventsPerRead` events
/// (history, catch-up, gap filling), the room list by `roomsPerRead` rooms, a room's members and a
/// dead node's memberships by `namesPerRead`. So the largest reply the node requests is known, its
/// connections' parsers refuse anything larger (the connection fails and the link reconnects),
/// and the memory budget can reserve what a connection may hold.
public enum ClusterReplies {
    /// Events of a room's log read per command.
    public static let eventsPerRead = 64
    /// Rooms per read of the room list; each comes with its topic, as long as an event.
    public static let roomsPerRead = 64
    /// Member nicks per read of a room's members; (room, nick) pairs per read of a dead node's.
    public static let namesPerRead = 1_000

    /// What Redis adds around an event's payload: `seq time ` in a publication or a topic, a
    /// stream entry's ID, its field names and its time.
    static let framing = 64
    /// The longest room name or nick a node writes (ChatName's limits are 32 and 24 bytes), with
    /// a score or a count beside it.
    static let nameBytes = 64

    /// The limits of a node's connections when no event's payload (its chat frame as the origin
    /// encoded it) is longer than `maxPayload` bytes: a bulk string is at most a payload and its
    /// framing; an array at most the largest page; a reply at most what the largest page costs.
    public static func limits(maxPayload: Int) -> RESPParser.Limits {
        let valueCost = RESPParser.Limits.valueCost
        var limits = RESPParser.Limits()
        limits.maxBulkLength = maxPayload + framing
        limits.maxArrayCount = max(eventsPerRead, 3 * roomsPerRead, 2 * namesPerRead)
        // A log entry is [ID, [t, time, p, payload]]: seven values; a listed room three.
        let entry = limits.maxBulkLength + framing + 7 * valueCost
        let room = limits.maxBulkLength + nameBytes + 3 * valueCost
        let names = 2 * (nameBytes + valueCost)
        limits.maxReplyCost = 64 * 1024 + max(eventsPerRead * entry, roomsPerRead * room, namesPerRead * names)
        return limits
    }

    /// The most a connection parsing with `limits` holds for its replies: the reply being parsed
    /// as values (its cost), and its bytes in the parser's buffer — which keeps bytes already
    /// parsed until they are half of it, and takes a turn's reads (8 × 64 KiB) at once.
    public static func connectionBytes(_ limits: RESPParser.Limits) -> Int {
        limits.maxReplyCost + 2 * (limits.maxReplyCost + 8 * 64 * 1024)
    }
}
