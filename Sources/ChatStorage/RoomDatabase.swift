import CSQLite
import ChatProtocol

/// Why storage could not be opened or used; one line for the log and for the exit message.
public struct StorageError: Error, CustomStringConvertible {
    /// What went wrong, for people.
    public var message: String
    /// The SQLite failure behind it, if any.
    public var sqlite: SQLiteError?

    /// Describes a failure.
    public init(_ message: String, sqlite: SQLiteError? = nil) {
        self.message = message
        self.sqlite = sqlite
    }

    /// The message.
    public var description: String { message }
}

/// The rooms database: the schema, and the few statements the server runs on it.
///
/// Two tables: `rooms` (one row per room: epoch, last `seq`, topic, last activity, and its
/// events' count and bytes for retention) and `events` (messages, actions and topic changes,
/// keyed by room and `seq`). `PRAGMA user_version` is the schema version: a file of a newer
/// version is refused rather than misread.
///
/// One instance is one connection, used by one queue: the server writes through one on its
/// writer queue and reads through another on its own queue. WAL mode lets the reader read while
/// the writer commits.
public final class RoomDatabase: @unchecked Sendable {
    /// The schema this code reads and writes.
    public static let schemaVersion: Int64 = 1
    /// The database's file name in the data directory.
    public static let fileName = "rooms.sqlite3"

    /// The connection.
    public let database: SQLiteDatabase
    private let insertEvent: SQLiteStatement
    private let upsertRoom: SQLiteStatement
    private let selectRoom: SQLiteStatement
    private let selectFirstSeq: SQLiteStatement
    private let selectBefore: SQLiteStatement
    private let selectAfter: SQLiteStatement
    private let deleteEvent: SQLiteStatement
    private let shrinkRoomCounts: SQLiteStatement

    /// Opens (creating it if `create`) the database at `path`, in WAL mode with `durability`,
    /// creating the schema in a new file. Throws a `StorageError` naming the file for one that
    /// is not a database, is of a newer schema, or cannot be opened.
    public init(path: String, durability: Durability, create: Bool) throws(StorageError) {
        do {
            database = try SQLiteDatabase(path: path, mode: create ? .readWriteCreate : .readWrite)
        } catch {
            throw StorageError("cannot open \(path): \(error.message)", sqlite: error)
        }
        do {
            // The first statement reads the header: a file that is not a database fails here.
            let version = try database.integer("PRAGMA user_version") ?? 0
            if version > Self.schemaVersion {
                throw StorageError(
                    "\(path) has schema version \(version), written by a newer chat-server; this one reads version "
                        + "\(Self.schemaVersion) (use a newer chat-server, or another --data-dir)")
            }
            if version == 0 {
                guard create else { throw StorageError("\(path) has no rooms schema") }
                try Self.createSchema(in: database)
            }
            let mode = try database.text("PRAGMA journal_mode=WAL")
            guard mode == "wal" else {
                throw StorageError("\(path): SQLite would not use write-ahead logging (journal_mode is \(mode ?? "unknown"))")
            }
            try database.execute("PRAGMA synchronous=\(durability.pragmaValue)")
            // After a checkpoint the log is cut back to this size, so it does not keep a burst's size.
            try database.execute("PRAGMA journal_size_limit=\(4 << 20)")
            insertEvent = try database.prepare(
                "INSERT INTO events(room, seq, kind, time, sender, text) VALUES(?1, ?2, ?3, ?4, ?5, ?6)")
            upsertRoom = try database.prepare(
                """
                INSERT INTO rooms(name, epoch, last_seq, topic_text, topic_set_by, topic_time, topic_seq, last_active, \
                event_count, event_bytes) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
                ON CONFLICT(name) DO UPDATE SET epoch = excluded.epoch, last_seq = max(last_seq, excluded.last_seq),
                topic_text = excluded.topic_text, topic_set_by = excluded.topic_set_by, topic_time = excluded.topic_time,
                topic_seq = excluded.topic_seq, last_active = max(last_active, excluded.last_active),
                event_count = event_count + excluded.event_count, event_bytes = event_bytes + excluded.event_bytes
                """)
            selectRoom = try database.prepare(
                "SELECT epoch, last_seq, topic_text, topic_set_by, topic_time, topic_seq, last_active FROM rooms WHERE name = ?1")
            selectFirstSeq = try database.prepare("SELECT min(seq) FROM events WHERE room = ?1")
            selectBefore = try database.prepare(
                "SELECT seq, kind, time, sender, text FROM events WHERE room = ?1 AND seq < ?2 ORDER BY seq DESC LIMIT ?3")
            selectAfter = try database.prepare(
                "SELECT seq, kind, time, sender, text FROM events WHERE room = ?1 AND seq > ?2 ORDER BY seq ASC LIMIT ?3")
            deleteEvent = try database.prepare("DELETE FROM events WHERE room = ?1 AND seq = ?2")
            shrinkRoomCounts = try database.prepare(
                "UPDATE rooms SET event_count = event_count - ?2, event_bytes = event_bytes - ?3 WHERE name = ?1")
        } catch let error as StorageError {
            throw error
        } catch let error as SQLiteError {
            throw StorageError("cannot use \(path): \(error.message) (SQLite error \(error.code))", sqlite: error)
        } catch {
            throw StorageError("cannot use \(path): \(error)")
        }
    }

    private static func createSchema(in database: SQLiteDatabase) throws(SQLiteError) {
        // auto_vacuum must be set before the first table: with it, retention can give freed pages
        // back to the file system (`incremental_vacuum`) instead of keeping the file at its peak.
        try database.execute("PRAGMA auto_vacuum=INCREMENTAL")
        try database.transaction { () throws(SQLiteError) in
            try database.execute(
                """
                CREATE TABLE rooms(
                    name TEXT PRIMARY KEY NOT NULL,
                    epoch INTEGER NOT NULL,
                    last_seq INTEGER NOT NULL,
                    topic_text TEXT, topic_set_by TEXT, topic_time INTEGER, topic_seq INTEGER,
                    last_active INTEGER NOT NULL,
                    event_count INTEGER NOT NULL,
                    event_bytes INTEGER NOT NULL
                ) WITHOUT ROWID;
                CREATE TABLE events(
                    room TEXT NOT NULL,
                    seq INTEGER NOT NULL,
                    kind INTEGER NOT NULL,
                    time INTEGER NOT NULL,
                    sender TEXT NOT NULL,
                    text TEXT NOT NULL,
                    PRIMARY KEY(room, seq)
                ) WITHOUT ROWID;
                CREATE INDEX events_by_time ON events(time);
                PRAGMA user_version = \(schemaVersion);
                """)
        }
    }

    // MARK: Writing

    /// Writes `batch` in one transaction: all of it, or (throwing) none of it.
    public func commit(_ batch: RoomBatch) throws(SQLiteError) {
        guard !batch.isEmpty else { return }
        try database.transaction { () throws(SQLiteError) in
            var added: [String: (count: Int64, bytes: Int64)] = [:]
            for event in batch.events {
                let entry = event.entry
                try insertEvent.bind(
                    .text(event.room), .integer(Int64(bitPattern: entry.seq)), .integer(Int64(entry.kind.rawValue)),
                    .integer(Int64(bitPattern: entry.time)), .text(entry.sender), .text(entry.text))
                try insertEvent.run()
                added[event.room, default: (0, 0)].count += 1
                added[event.room, default: (0, 0)].bytes += Int64(event.storedBytes)
            }
            for room in batch.rooms {
                let counts = added[room.name] ?? (0, 0)
                try upsertRoom.bind(
                    .text(room.name), .integer(Int64(bitPattern: room.epoch)), .integer(Int64(bitPattern: room.lastSeq)),
                    .text(room.topic?.text), .text(room.topic?.setBy),
                    room.topic.map { .integer(Int64(bitPattern: $0.time)) } ?? .text(nil),
                    room.topic.map { .integer(Int64(bitPattern: $0.seq)) } ?? .text(nil),
                    .integer(Int64(bitPattern: room.lastActive)), .integer(counts.count), .integer(counts.bytes))
                try upsertRoom.run()
            }
        }
    }

    // MARK: Reading

    /// The room named `name` with its `recent` newest events, or nil if none is stored.
    public func loadRoom(named name: String, recent: Int) throws(SQLiteError) -> StoredRoom? {
        defer { selectRoom.reset() }
        try selectRoom.bind(.text(name))
        guard try selectRoom.step() else { return nil }
        let topic: RoomTopic? =
            selectRoom.isNull(2)
            ? nil
            : RoomTopic(
                text: selectRoom.text(2), setBy: selectRoom.text(3), time: selectRoom.uint64(4), seq: selectRoom.uint64(5))
        let record = RoomRecord(
            name: name, epoch: selectRoom.uint64(0), lastSeq: selectRoom.uint64(1), topic: topic,
            lastActive: selectRoom.uint64(6))
        defer { selectFirstSeq.reset() }
        try selectFirstSeq.bind(.text(name))
        let firstSeq = try selectFirstSeq.step() ? selectFirstSeq.uint64(0) : 0
        let (entries, _) = try page(of: name, .before, from: 0, limit: recent, budget: Int.max, cost: { _ in 0 })
        return StoredRoom(record: record, firstSeq: firstSeq, recent: entries)
    }

    /// A page of `room`'s events next to `seq`, oldest first, as `RoomHistory.page` answers it:
    /// at most `limit` entries costing at most `budget` by `cost` (at least one when any
    /// qualifies); `.before` 0 means the newest. `complete` when no stored event lies beyond the
    /// page in that direction.
    public func page(
        of room: String, _ direction: HistoryDirection, from seq: UInt64, limit: Int, budget: Int,
        cost: (HistoryEntry) -> Int
    ) throws(SQLiteError) -> (entries: [HistoryEntry], complete: Bool) {
        guard limit > 0 else { return ([], false) }
        let statement = direction == .before ? selectBefore : selectAfter
        defer { statement.reset() }
        let bound = direction == .before && seq == 0 ? Int64.max : Int64(bitPattern: seq)
        try statement.bind(.text(room), .integer(bound), .integer(Int64(limit) + 1))
        var taken: [HistoryEntry] = []
        var spent = 0
        var complete = true
        while try statement.step() {
            let kind = HistoryEntry.Kind(rawValue: UInt8(truncatingIfNeeded: statement.int64(1))) ?? .message
            let entry = HistoryEntry(
                kind: kind, seq: statement.uint64(0), time: statement.uint64(2), sender: statement.text(3),
                text: statement.text(4))
            spent += cost(entry)
            if taken.count == limit || (spent > budget && !taken.isEmpty) {
                complete = false
                break
            }
            taken.append(entry)
        }
        return (direction == .before ? taken.reversed() : taken, complete)
    }

    // MARK: Retention

    /// Deletes up to `maxDeletions` rows that `policy` no longer keeps, in one transaction, and
    /// gives the freed pages back to the file system. Returns how many rows it deleted: call
    /// again while that is `maxDeletions` (a commit may run in between).
    public func applyRetention(_ policy: RetentionPolicy, now: UInt64, maxDeletions: Int) throws(SQLiteError) -> Int {
        let deleted = try database.transaction { () throws(SQLiteError) -> Int in
            var left = maxDeletions
            if policy.maxAgeMillis > 0, left > 0 {
                let cutoff = now > policy.maxAgeMillis ? now - policy.maxAgeMillis : 0
                left -= try deleteEvents(
                    "SELECT room, seq, sender, text FROM events WHERE time < ?1 ORDER BY time LIMIT ?2",
                    bindings: [.integer(Int64(bitPattern: cutoff))], limit: left)
            }
            if policy.maxEventsPerRoom > 0 || policy.maxBytesPerRoom > 0, left > 0 {
                left -= try trimRooms(policy, limit: left)
            }
            if policy.maxTotalBytes > 0, left > 0 {
                left -= try trimTotal(to: policy.maxTotalBytes, limit: left)
            }
            if left > 0 {
                left -= try deleteIdleRooms(policy, now: now, limit: left)
            }
            return maxDeletions - left
        }
        if deleted > 0 { try database.execute("PRAGMA incremental_vacuum") }
        return deleted
    }

    /// What all rooms' events count for against `maxTotalBytes`, plus each room's row.
    public func totalBytes() throws(SQLiteError) -> Int {
        Int(try database.integer("SELECT coalesce(sum(event_bytes + 64 + length(name)), 0) FROM rooms") ?? 0)
    }

    /// Deletes the events `query` selects (room, seq, sender, text; its last parameter is the
    /// limit), keeping the rooms' counts true; returns how many.
    private func deleteEvents(_ query: String, bindings: [SQLiteValue], limit: Int) throws(SQLiteError) -> Int {
        let select = try database.prepare(query)
        for (offset, value) in bindings.enumerated() {
            switch value {
            case .integer(let number): try select.bind(number, at: Int32(offset + 1))
            case .text(let text): try select.bind(text, at: Int32(offset + 1))
            }
        }
        try select.bind(Int64(limit), at: Int32(bindings.count + 1))
        var doomed: [(room: String, seq: Int64, bytes: Int64)] = []
        while try select.step() {
            let room = select.text(0)
            let bytes = 32 + room.utf8.count + select.text(2).utf8.count + select.text(3).utf8.count
            doomed.append((room, select.int64(1), Int64(bytes)))
        }
        var removed: [String: (count: Int64, bytes: Int64)] = [:]
        for row in doomed {
            try deleteEvent.bind(.text(row.room), .integer(row.seq))
            try deleteEvent.run()
            removed[row.room, default: (0, 0)].count += 1
            removed[row.room, default: (0, 0)].bytes += row.bytes
        }
        for (room, counts) in removed {
            try shrinkRoomCounts.bind(.text(room), .integer(counts.count), .integer(counts.bytes))
            try shrinkRoomCounts.run()
        }
        return doomed.count
    }

    /// Deletes the oldest events of rooms over the per-room bounds.
    private func trimRooms(_ policy: RetentionPolicy, limit: Int) throws(SQLiteError) -> Int {
        let maxCount = policy.maxEventsPerRoom > 0 ? Int64(policy.maxEventsPerRoom) : Int64.max
        let maxBytes = policy.maxBytesPerRoom > 0 ? Int64(policy.maxBytesPerRoom) : Int64.max
        let over = try database.prepare(
            "SELECT name, event_count, event_bytes FROM rooms WHERE event_count > ?1 OR event_bytes > ?2 LIMIT 16")
        try over.bind(.integer(maxCount), .integer(maxBytes))
        var rooms: [(name: String, count: Int64, bytes: Int64)] = []
        while try over.step() { rooms.append((over.text(0), over.int64(1), over.int64(2))) }
        var left = limit
        for room in rooms where left > 0 {
            // Walk the oldest events until what remains fits both bounds.
            let oldest = try database.prepare(
                "SELECT seq, sender, text FROM events WHERE room = ?1 ORDER BY seq ASC LIMIT ?2")
            try oldest.bind(.text(room.name), .integer(Int64(left)))
            var count = room.count
            var bytes = room.bytes
            var lastDoomed: Int64?
            while count > maxCount || bytes > maxBytes, try oldest.step() {
                count -= 1
                bytes -= Int64(32 + room.name.utf8.count + oldest.text(1).utf8.count + oldest.text(2).utf8.count)
                lastDoomed = oldest.int64(0)
            }
            guard let lastDoomed else { continue }
            left -= try deleteEvents(
                "SELECT room, seq, sender, text FROM events WHERE room = ?1 AND seq <= ?2 ORDER BY seq LIMIT ?3",
                bindings: [.text(room.name), .integer(lastDoomed)], limit: left)
        }
        return limit - left
    }

    /// Deletes the globally oldest events while everything counts for more than `maxTotal`.
    private func trimTotal(to maxTotal: Int, limit: Int) throws(SQLiteError) -> Int {
        var left = limit
        while left > 0 {
            let excess = try totalBytes() - maxTotal
            guard excess > 0 else { break }
            // Count off the oldest events until they make up the excess, then delete just those.
            let oldest = try database.prepare("SELECT room, sender, text FROM events ORDER BY time LIMIT ?1")
            try oldest.bind(.integer(Int64(left)))
            var batch = 0
            var freed = 0
            while freed < excess, try oldest.step() {
                freed += 32 + oldest.text(0).utf8.count + oldest.text(1).utf8.count + oldest.text(2).utf8.count
                batch += 1
            }
            guard batch > 0 else { break }
            let deleted = try deleteEvents(
                "SELECT room, seq, sender, text FROM events ORDER BY time LIMIT ?1", bindings: [], limit: batch)
            left -= deleted
            if deleted == 0 { break }
        }
        return limit - left
    }

    /// Deletes rooms with no events left that idled past `maxAgeMillis`, and, while the total is
    /// still over `maxTotalBytes`, the least recently active rooms with no events.
    private func deleteIdleRooms(_ policy: RetentionPolicy, now: UInt64, limit: Int) throws(SQLiteError) -> Int {
        var deleted = 0
        if policy.maxAgeMillis > 0 {
            let cutoff = now > policy.maxAgeMillis ? now - policy.maxAgeMillis : 0
            let delete = try database.prepare(
                """
                DELETE FROM rooms WHERE name IN (SELECT name FROM rooms WHERE event_count = 0 AND last_active < ?1 LIMIT ?2)
                """)
            try delete.bind(.integer(Int64(bitPattern: cutoff)), .integer(Int64(limit)))
            try delete.run()
            deleted += database.changes
        }
        if policy.maxTotalBytes > 0, deleted < limit {
            let excess = try totalBytes() - policy.maxTotalBytes
            if excess > 0 {
                let delete = try database.prepare(
                    """
                    DELETE FROM rooms WHERE name IN
                    (SELECT name FROM rooms WHERE event_count = 0 ORDER BY last_active LIMIT ?1)
                    """)
                try delete.bind(.integer(Int64(min(limit - deleted, excess / 64 + 1))))
                try delete.run()
                deleted += database.changes
            }
        }
        return deleted
    }
}
