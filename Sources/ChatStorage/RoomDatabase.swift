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
/// events' count and bytes for retention) and `event_chunks` (messages, actions and topic
/// changes, a run of consecutive events of one room per row — `EventChunk` says why — keyed by
/// room and first `seq`, indexed by the oldest event's time for retention). `PRAGMA user_version`
/// is the schema version: version 1 (a row per event) is converted when the writer opens it, a
/// file of a newer version is refused rather than misread.
///
/// One instance is one connection, used by one queue: the server writes through one on its
/// writer queue and reads through another on its own queue. WAL mode lets the reader read while
/// the writer commits.
public final class RoomDatabase: @unchecked Sendable {
    /// The schema this code reads and writes.
    public static let schemaVersion: Int64 = 2
    /// The database's file name in the data directory.
    public static let fileName = "rooms.sqlite3"

    /// The connection.
    public let database: SQLiteDatabase
    private let insertChunk: SQLiteStatement
    private let replaceChunk: SQLiteStatement
    private let deleteChunk: SQLiteStatement
    private let upsertRoom: SQLiteStatement
    private let selectRoom: SQLiteStatement
    private let selectFirstSeq: SQLiteStatement
    private let selectLastSeq: SQLiteStatement
    private let selectChunksBefore: SQLiteStatement
    private let selectChunkAt: SQLiteStatement
    private let selectChunksAfter: SQLiteStatement
    private let shrinkRoomCounts: SQLiteStatement

    static let insertChunkSQL = """
        INSERT INTO event_chunks(room, first_seq, last_seq, oldest_time, event_count, event_bytes, events)
        VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)
        """

    /// Opens (creating it if `create`) the database at `path`, in WAL mode with `durability`,
    /// creating the schema in a new file and converting a version 1 file (only when `create`:
    /// the writer opens first). Throws a `StorageError` naming the file for one that is not a
    /// database, is of a newer schema, or cannot be opened.
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
            if version < Self.schemaVersion, !create {
                throw StorageError(version == 0 ? "\(path) has no rooms schema" : "\(path) has schema version \(version), not converted yet")
            }
            if version == 0 { try Self.createSchema(in: database) }
            if version == 1 { try Self.convertFromVersion1(database) }
            let mode = try database.text("PRAGMA journal_mode=WAL")
            guard mode == "wal" else {
                throw StorageError("\(path): SQLite would not use write-ahead logging (journal_mode is \(mode ?? "unknown"))")
            }
            try database.execute("PRAGMA synchronous=\(durability.pragmaValue)")
            // After a checkpoint the log is cut back to this size, so it does not keep a burst's size.
            try database.execute("PRAGMA journal_size_limit=\(4 << 20)")
            insertChunk = try database.prepare(Self.insertChunkSQL)
            replaceChunk = try database.prepare(
                """
                UPDATE event_chunks SET first_seq = ?3, last_seq = ?4, oldest_time = ?5, event_count = ?6, event_bytes = ?7,
                events = ?8 WHERE room = ?1 AND first_seq = ?2
                """)
            deleteChunk = try database.prepare("DELETE FROM event_chunks WHERE room = ?1 AND first_seq = ?2")
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
            selectFirstSeq = try database.prepare(
                "SELECT first_seq FROM event_chunks WHERE room = ?1 ORDER BY first_seq ASC LIMIT 1")
            selectLastSeq = try database.prepare(
                "SELECT last_seq FROM event_chunks WHERE room = ?1 ORDER BY first_seq DESC LIMIT 1")
            selectChunksBefore = try database.prepare(
                "SELECT first_seq, events FROM event_chunks WHERE room = ?1 AND first_seq < ?2 ORDER BY first_seq DESC")
            selectChunkAt = try database.prepare(
                "SELECT first_seq, events FROM event_chunks WHERE room = ?1 AND first_seq <= ?2 ORDER BY first_seq DESC LIMIT 1")
            selectChunksAfter = try database.prepare(
                "SELECT first_seq, events FROM event_chunks WHERE room = ?1 AND first_seq > ?2 ORDER BY first_seq ASC")
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
                """)
            try createChunkTable(in: database)
        }
    }

    private static func createChunkTable(in database: SQLiteDatabase) throws(SQLiteError) {
        try database.execute(
            """
            CREATE TABLE event_chunks(
                room TEXT NOT NULL,
                first_seq INTEGER NOT NULL,
                last_seq INTEGER NOT NULL,
                oldest_time INTEGER NOT NULL,
                event_count INTEGER NOT NULL,
                event_bytes INTEGER NOT NULL,
                events BLOB NOT NULL,
                PRIMARY KEY(room, first_seq)
            ) WITHOUT ROWID;
            CREATE INDEX event_chunks_by_time ON event_chunks(oldest_time);
            PRAGMA user_version = \(schemaVersion);
            """)
    }

    /// Converts a version 1 file (a row per event in `events`) into chunks, in one transaction.
    private static func convertFromVersion1(_ database: SQLiteDatabase) throws(SQLiteError) {
        try database.transaction { () throws(SQLiteError) in
            try createChunkTable(in: database)
            let insert = try database.prepare(insertChunkSQL)
            let select = try database.prepare("SELECT room, seq, kind, time, sender, text FROM events ORDER BY room, seq")
            var room = ""
            var run: [HistoryEntry] = []
            while try select.step() {
                let name = select.text(0)
                if name != room || run.count == EventChunk.maxEvents {
                    if !run.isEmpty { try write(EventChunk(run), room: room, with: insert) }
                    room = name
                    run = []
                }
                let kind = HistoryEntry.Kind(rawValue: UInt8(truncatingIfNeeded: select.int64(2))) ?? .message
                run.append(HistoryEntry(kind: kind, seq: select.uint64(1), time: select.uint64(3), sender: select.text(4), text: select.text(5)))
            }
            if !run.isEmpty { try write(EventChunk(run), room: room, with: insert) }
            select.reset()
            try database.execute("DROP TABLE events")
        }
    }

    /// Inserts `chunk` of `room` through `statement` (`insertChunkSQL`); returns its count and bytes.
    @discardableResult
    private static func write(_ chunk: EventChunk, room: String, with statement: SQLiteStatement) throws(SQLiteError) -> (
        count: Int64, bytes: Int64
    ) {
        let bytes = chunk.events.reduce(0) { $0 + StoredEvent.storedBytes(room: room, entry: $1) }
        try statement.bind(
            .text(room), .integer(Int64(bitPattern: chunk.firstSeq)), .integer(Int64(bitPattern: chunk.lastSeq)),
            .integer(Int64(bitPattern: chunk.oldestTime)), .integer(Int64(chunk.events.count)), .integer(Int64(bytes)),
            .blob(chunk.encoded()))
        try statement.run()
        return (Int64(chunk.events.count), Int64(bytes))
    }

    // MARK: Writing

    /// Writes `batch` in one transaction: all of it, or (throwing) none of it. Each room's events
    /// must come after what the room has stored (SQLITE_CONSTRAINT otherwise).
    public func commit(_ batch: RoomBatch) throws(SQLiteError) {
        guard !batch.isEmpty else { return }
        try database.transaction { () throws(SQLiteError) in
            var added: [String: (count: Int64, bytes: Int64)] = [:]
            var start = batch.events.startIndex
            // A batch holds runs of events per room; each run becomes a chunk or a few.
            while start < batch.events.endIndex {
                let room = batch.events[start].room
                var end = start + 1
                while end < batch.events.endIndex, batch.events[end].room == room { end += 1 }
                let run = batch.events[start..<end].map(\.entry)
                var last = try lastStoredSeq(of: room)
                for entry in run {
                    guard entry.seq > last else {
                        throw SQLiteError(
                            operation: "commit", code: SQLITE_CONSTRAINT,
                            message: "event \(entry.seq) of \(room) is not after the stored event \(last)")
                    }
                    last = entry.seq
                }
                for chunk in EventChunk.split(run[...]) {
                    let counts = try Self.write(chunk, room: room, with: insertChunk)
                    added[room, default: (0, 0)].count += counts.count
                    added[room, default: (0, 0)].bytes += counts.bytes
                }
                start = end
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

    private func lastStoredSeq(of room: String) throws(SQLiteError) -> UInt64 {
        defer { selectLastSeq.reset() }
        try selectLastSeq.bind(.text(room))
        return try selectLastSeq.step() ? selectLastSeq.uint64(0) : 0
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
        var page = PageBuilder(limit: limit, budget: budget)
        switch direction {
        case .before:
            let bound = seq == 0 ? UInt64(Int64.max) : seq
            var chunks = ChunkCursor(selectChunksBefore, room: room, seq: bound)
            defer { chunks.finish() }
            scan: while let chunk = try chunks.next() {
                for entry in chunk.events.reversed() where entry.seq < bound {
                    guard page.offer(entry, cost: cost(entry)) else { break scan }
                }
            }
            return (page.taken.reversed(), page.complete)
        case .after:
            // The chunk holding seq + 1 may begin at or before seq; the rest begin after it.
            var first = ChunkCursor(selectChunkAt, room: room, seq: seq)
            defer { first.finish() }
            if let chunk = try first.next() {
                for entry in chunk.events where entry.seq > seq {
                    guard page.offer(entry, cost: cost(entry)) else { return (page.taken, page.complete) }
                }
            }
            var chunks = ChunkCursor(selectChunksAfter, room: room, seq: seq)
            defer { chunks.finish() }
            scan: while let chunk = try chunks.next() {
                for entry in chunk.events {
                    guard page.offer(entry, cost: cost(entry)) else { break scan }
                }
            }
            return (page.taken, page.complete)
        }
    }

    // MARK: Retention

    /// Deletes up to `maxDeletions` events that `policy` no longer keeps, in one transaction, and
    /// gives the freed pages back to the file system. Returns how many events it deleted: call
    /// again while that is `maxDeletions` (a commit may run in between).
    public func applyRetention(_ policy: RetentionPolicy, now: UInt64, maxDeletions: Int) throws(SQLiteError) -> Int {
        let deleted = try database.transaction { () throws(SQLiteError) -> Int in
            var left = maxDeletions
            if policy.maxAgeMillis > 0, left > 0 {
                let cutoff = now > policy.maxAgeMillis ? now - policy.maxAgeMillis : 0
                left -= try trimByAge(before: cutoff, limit: left)
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

    /// Deletes every event older than `cutoff`, oldest chunks first, at most `limit`.
    private func trimByAge(before cutoff: UInt64, limit: Int) throws(SQLiteError) -> Int {
        var left = limit
        while left > 0 {
            let rows = try chunkRows(
                "SELECT room, first_seq, events FROM event_chunks WHERE oldest_time < ?1 ORDER BY oldest_time LIMIT 16",
                .integer(Int64(bitPattern: cutoff)))
            for row in rows where left > 0 {
                left -= try remove(from: row, limit: left) { $0.time < cutoff }
            }
            // A chunk cut here keeps only events at or after the cutoff, so it is not found again.
            if rows.count < 16 { break }
        }
        return limit - left
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
        for room in rooms {
            var count = room.count
            var bytes = room.bytes
            while left > 0, count > maxCount || bytes > maxBytes {
                let rows = try chunkRows(
                    "SELECT room, first_seq, events FROM event_chunks WHERE room = ?1 ORDER BY first_seq LIMIT 4", .text(room.name))
                guard !rows.isEmpty else { break }
                for row in rows where left > 0 {
                    left -= try remove(from: row, limit: left) { entry in
                        guard count > maxCount || bytes > maxBytes else { return false }
                        count -= 1
                        bytes -= Int64(StoredEvent.storedBytes(room: room.name, entry: entry))
                        return true
                    }
                }
            }
        }
        return limit - left
    }

    /// Deletes the globally oldest events while everything counts for more than `maxTotal`.
    private func trimTotal(to maxTotal: Int, limit: Int) throws(SQLiteError) -> Int {
        var left = limit
        var excess = try totalBytes() - maxTotal
        while left > 0, excess > 0 {
            let rows = try chunkRows("SELECT room, first_seq, events FROM event_chunks ORDER BY oldest_time LIMIT 4")
            guard !rows.isEmpty else { break }
            for row in rows where left > 0 {
                left -= try remove(from: row, limit: left) { entry in
                    guard excess > 0 else { return false }
                    excess -= StoredEvent.storedBytes(room: row.room, entry: entry)
                    return true
                }
            }
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

    /// A stored chunk, decoded, with where it is stored.
    private struct ChunkRow {
        var room: String
        var firstSeq: UInt64
        var chunk: EventChunk
    }

    /// The chunks `query` selects (room, first_seq, events), read in full before any is changed.
    private func chunkRows(_ query: String, _ bindings: SQLiteValue...) throws(SQLiteError) -> [ChunkRow] {
        let select = try database.prepare(query)
        try select.bind(bindings)
        var rows: [ChunkRow] = []
        while try select.step() {
            let room = select.text(0)
            let firstSeq = select.uint64(1)
            rows.append(ChunkRow(room: room, firstSeq: firstSeq, chunk: try select.chunk(at: 2, of: room, from: firstSeq)))
        }
        return rows
    }

    /// Deletes from `row`, in `seq` order, up to `limit` events for which `doomed` is true (it
    /// is asked only while the limit allows), rewriting or deleting the chunk and keeping the
    /// room's counts true; returns how many.
    private func remove(from row: ChunkRow, limit: Int, where doomed: (HistoryEntry) -> Bool) throws(SQLiteError) -> Int {
        var kept: [HistoryEntry] = []
        var removed = 0
        var removedBytes = 0
        for entry in row.chunk.events {
            if removed < limit, doomed(entry) {
                removed += 1
                removedBytes += StoredEvent.storedBytes(room: row.room, entry: entry)
            } else {
                kept.append(entry)
            }
        }
        guard removed > 0 else { return 0 }
        if kept.isEmpty {
            try deleteChunk.bind(.text(row.room), .integer(Int64(bitPattern: row.firstSeq)))
            try deleteChunk.run()
        } else {
            let chunk = EventChunk(kept)
            let bytes = kept.reduce(0) { $0 + StoredEvent.storedBytes(room: row.room, entry: $1) }
            try replaceChunk.bind(
                .text(row.room), .integer(Int64(bitPattern: row.firstSeq)), .integer(Int64(bitPattern: chunk.firstSeq)),
                .integer(Int64(bitPattern: chunk.lastSeq)), .integer(Int64(bitPattern: chunk.oldestTime)),
                .integer(Int64(kept.count)), .integer(Int64(bytes)), .blob(chunk.encoded()))
            try replaceChunk.run()
        }
        try shrinkRoomCounts.bind(.text(row.room), .integer(Int64(removed)), .integer(Int64(removedBytes)))
        try shrinkRoomCounts.run()
        return removed
    }
}

/// Collects a page of history as `RoomHistory.page` does: events offered in page order until the
/// limit or the budget is reached (at least one, even over the budget).
private struct PageBuilder {
    let limit: Int
    let budget: Int
    var taken: [HistoryEntry] = []
    var spent = 0
    /// False once an event was turned away: more lie beyond the page.
    var complete = true

    init(limit: Int, budget: Int) {
        self.limit = limit
        self.budget = budget
    }

    /// Takes `entry` if the page has room for it; false (and the page is not complete) if not.
    mutating func offer(_ entry: HistoryEntry, cost: Int) -> Bool {
        spent += cost
        if taken.count == limit || (spent > budget && !taken.isEmpty) {
            complete = false
            return false
        }
        taken.append(entry)
        return true
    }
}

/// Steps through the chunks a prepared statement (room, seq; selecting first_seq and events)
/// returns, decoding each; `finish` resets the statement.
private struct ChunkCursor {
    let statement: SQLiteStatement
    let room: String
    var bound = false
    let seq: UInt64

    init(_ statement: SQLiteStatement, room: String, seq: UInt64) {
        self.statement = statement
        self.room = room
        self.seq = seq
    }

    mutating func next() throws(SQLiteError) -> EventChunk? {
        if !bound {
            try statement.bind(.text(room), .integer(Int64(bitPattern: min(seq, UInt64(Int64.max)))))
            bound = true
        }
        guard try statement.step() else { return nil }
        return try statement.chunk(at: 1, of: room, from: statement.uint64(0))
    }

    func finish() { statement.reset() }
}

extension SQLiteStatement {
    /// Column `index` of the current row decoded as the chunk of `room` that starts at
    /// `firstSeq`; a blob that does not decode is SQLITE_CORRUPT.
    fileprivate func chunk(at index: Int32, of room: String, from firstSeq: UInt64) throws(SQLiteError) -> EventChunk {
        guard let chunk = withBlob(index, { EventChunk.decode($0, firstSeq: firstSeq) }) else {
            throw SQLiteError(
                operation: "read the events of \(room)", code: SQLITE_CORRUPT,
                message: "the chunk of events from seq \(firstSeq) is malformed")
        }
        return chunk
    }
}
