import ChatCore
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
/// Two tables: `rooms` (one row per room: epoch, last `seq`, last activity, its events' count and
/// bytes and its own counted bytes for retention, topic; indexed by last activity) and
/// `event_chunks` (messages, actions and topic changes, a run of consecutive events of one room
/// per row — `EventChunk` says why — keyed by room and first `seq`, indexed by the oldest event's
/// time for retention). `PRAGMA user_version` is the schema version: versions 1 (a row per event)
/// and 2 (rooms without their counted bytes) are converted when the writer opens them, a file of
/// a newer version is refused rather than misread.
///
/// One instance is one connection, used by one queue: the server writes through one on its
/// writer queue (the journal's hand-offs, or commits; retention; checkpoints) and reads through
/// another on a read queue. WAL mode lets the reader read while the writer commits. `counted` and `roomsToCheck` belong to the writer's queue too.
public final class RoomDatabase: @unchecked Sendable {
    /// The schema this code reads and writes.
    public static let schemaVersion: Int64 = 3
    /// The database's file name in the data directory.
    public static let fileName = "rooms.sqlite3"

    /// The most the data directory holds, every file in it, when retention keeps what is stored
    /// to `totalBytes` (`RetentionPolicy.maxTotalBytes`), as docs/SERVER.md ("Retention") states
    /// it: SQLite's pages take up to 1.5 times the counted bytes (part-filled pages, indexes,
    /// pages not yet given back; 1.13–1.31 measured), and 16 MiB covers the write-ahead log, its
    /// index and the journal: a checkpoint run starts at 4 MiB of log, and a hand-off of the
    /// journal writes at most 4 MiB of records (`SQLiteRoomStore.journalHoldBytes`; their pages
    /// and the tables', up to 6 MiB), so the log stays within about 10 MiB, cut back to 4 MiB
    /// when it starts over; the journal's files hold those 4 MiB of records and a commit. Add
    /// one commit: a commit that passes the total is trimmed back right after it.
    public static func directoryBound(totalBytes: Int) -> Int { totalBytes / 2 * 3 + (16 << 20) }

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
    private let selectRoomCounts: SQLiteStatement
    private let touchRoom: SQLiteStatement
    private let deleteRoomRow: SQLiteStatement
    private let deleteRoomChunks: SQLiteStatement
    private let transactionStatements: SQLiteDatabase.TransactionStatements
    /// Everything stored counts for this many bytes against `RetentionPolicy.maxTotalBytes`
    /// (rows and events): kept up to date by commits and retention, so retention need not add up
    /// every row each step; nil until first needed, and again after a transaction rolled back.
    private var counted: Int?
    /// Rooms that may be over the per-room bounds: those a commit changed since retention last
    /// looked; nil (look at every room) until retention first runs, and after a rollback.
    private var roomsToCheck: Set<String>?

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
            if version == 1 || version == 2 { try Self.convert(database, from: version) }
            // Beside the version 3 tables, without a new version: a server that predates it
            // ignores it, and one that finds it missing starts it (`JournalState`).
            if create { try database.execute(Self.journalStateSQL) }
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
                event_count, event_bytes, row_bytes) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
                ON CONFLICT(name) DO UPDATE SET epoch = excluded.epoch, last_seq = max(last_seq, excluded.last_seq),
                topic_text = excluded.topic_text, topic_set_by = excluded.topic_set_by, topic_time = excluded.topic_time,
                topic_seq = excluded.topic_seq, last_active = max(last_active, excluded.last_active),
                event_count = event_count + excluded.event_count, event_bytes = event_bytes + excluded.event_bytes,
                row_bytes = excluded.row_bytes
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
            selectRoomCounts = try database.prepare(
                "SELECT row_bytes, event_count, event_bytes, last_active FROM rooms WHERE name = ?1")
            touchRoom = try database.prepare("UPDATE rooms SET last_active = max(last_active, ?2) WHERE name = ?1")
            deleteRoomRow = try database.prepare("DELETE FROM rooms WHERE name = ?1")
            deleteRoomChunks = try database.prepare("DELETE FROM event_chunks WHERE room = ?1")
            transactionStatements = try database.prepareTransaction()
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
            try createRoomTable(named: "rooms", in: database)
            try createChunkTable(in: database)
            try database.execute("PRAGMA user_version = \(schemaVersion)")
        }
    }

    /// Creates the rooms table (version 3) as `name`, with its index by last activity (which
    /// stays with the table when it is renamed).
    private static func createRoomTable(named name: String, in database: SQLiteDatabase) throws(SQLiteError) {
        // The numbers come before the topic: a row longer than about 1 KB spills into overflow
        // pages, and reading a column stored after a 16 KB topic would read them all.
        try database.execute(
            """
            CREATE TABLE \(name)(
                name TEXT PRIMARY KEY NOT NULL,
                epoch INTEGER NOT NULL,
                last_seq INTEGER NOT NULL,
                last_active INTEGER NOT NULL,
                event_count INTEGER NOT NULL,
                event_bytes INTEGER NOT NULL,
                row_bytes INTEGER NOT NULL,
                topic_time INTEGER, topic_seq INTEGER, topic_set_by TEXT, topic_text TEXT
            ) WITHOUT ROWID;
            CREATE INDEX rooms_by_activity ON \(name)(last_active);
            """)
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
            """)
    }

    /// Converts a version 1 or 2 file in one transaction: version 1's `events` (a row per event)
    /// into chunks, then the rooms into version 3's table, each row with its counted bytes.
    private static func convert(_ database: SQLiteDatabase, from version: Int64) throws(SQLiteError) {
        try database.transaction { () throws(SQLiteError) in
            try createRoomTable(named: "rooms_v3", in: database)
            try database.execute(
                """
                INSERT INTO rooms_v3(name, epoch, last_seq, last_active, event_count, event_bytes, row_bytes,
                    topic_time, topic_seq, topic_set_by, topic_text)
                SELECT name, epoch, last_seq, last_active, event_count, event_bytes,
                    \(RoomRecord.rowOverhead) + 2 * length(CAST(name AS BLOB)) + coalesce(length(CAST(topic_text AS BLOB))
                    + length(CAST(topic_set_by AS BLOB)), 0),
                    topic_time, topic_seq, topic_set_by, topic_text
                FROM rooms;
                DROP TABLE rooms;
                ALTER TABLE rooms_v3 RENAME TO rooms;
                """)
            if version == 1 { try chunkVersion1Events(database) }
            try database.execute("PRAGMA user_version = \(schemaVersion)")
        }
    }

    /// Moves version 1's events (a row per event in `events`) into a new chunk table.
    private static func chunkVersion1Events(_ database: SQLiteDatabase) throws(SQLiteError) {
        try createChunkTable(in: database)
        let insert = try database.prepare(insertChunkSQL)
        let select = try database.prepare("SELECT room, seq, kind, time, sender, text FROM events ORDER BY room, seq")
        var room = ""
        var run: [HistoryEntry] = []
        while try select.step() {
            let name = select.text(0)
            if name != room || run.count == EventChunk.maxEvents {
                if !run.isEmpty { try Self.insert(encodedChunk(of: run, room: room), with: insert) }
                room = name
                run = []
            }
            let kind = HistoryEntry.Kind(rawValue: UInt8(truncatingIfNeeded: select.int64(2))) ?? .message
            run.append(HistoryEntry(kind: kind, seq: select.uint64(1), time: select.uint64(3), sender: select.text(4), text: select.text(5)))
        }
        if !run.isEmpty { try Self.insert(encodedChunk(of: run, room: room), with: insert) }
        select.reset()
        try database.execute("DROP TABLE events")
    }

    /// `events` (increasing `seq`, at least one, within a chunk's bounds) of `room` as one
    /// `event_chunks` row: each event encoded once, here.
    static func encodedChunk<Events: Collection>(of events: Events, room: String) -> EncodedChunk where Events.Element: ChunkEvent {
        var bytes = 0
        var oldestTime = UInt64.max
        for index in events.indices {
            bytes += StoredEvent.storedBytes(room: room, sender: events[index].sender, text: events[index].text)
            oldestTime = min(oldestTime, events[index].time)
        }
        return EncodedChunk(
            room: room, firstSeq: events.first?.seq ?? 0, lastSeq: events[events.index(events.endIndex, offsetBy: -1)].seq,
            oldestTime: oldestTime, count: events.count, bytes: bytes, blob: EventChunk.encoded(events))
    }

    /// Inserts `chunk` through `statement` (`insertChunkSQL`).
    private static func insert(_ chunk: EncodedChunk, with statement: SQLiteStatement) throws(SQLiteError) {
        try statement.bind(
            .text(chunk.room), .integer(Int64(bitPattern: chunk.firstSeq)), .integer(Int64(bitPattern: chunk.lastSeq)),
            .integer(Int64(bitPattern: chunk.oldestTime)), .integer(Int64(chunk.count)), .integer(Int64(chunk.bytes)),
            .blob(chunk.blob))
        try statement.run()
    }

    /// Calls `body` with each chunk's worth of `batch`'s events, in order: a batch holds runs of
    /// events per room, each split as `EventChunk.split` splits (`EventChunk.chunkEnd`), the
    /// events read from the batch itself, not copied out.
    private static func forEachChunk<Failure: Error>(
        of batch: LogBatch, _ body: (_ room: String, _ events: ArraySlice<StoredEvent>) throws(Failure) -> Void
    ) throws(Failure) {
        var start = batch.events.startIndex
        while start < batch.events.endIndex {
            let room = batch.events[start].room
            var end = start + 1
            while end < batch.events.endIndex, batch.events[end].room == room { end += 1 }
            let run = batch.events[start..<end]
            var chunkStart = start
            while chunkStart < end {
                let chunkEnd = EventChunk.chunkEnd(of: run, from: chunkStart)
                try body(room, run[chunkStart..<chunkEnd])
                chunkStart = chunkEnd
            }
            start = end
        }
    }

    // MARK: Writing

    /// Writes `batch` in one transaction: all of it, or (throwing) none of it. Each room's events
    /// must come after what the room has stored (SQLITE_CONSTRAINT otherwise). Returns what it
    /// changed.
    @discardableResult
    public func commit(_ batch: LogBatch) throws(SQLiteError) -> CommittedChanges {
        guard !batch.hasNothingToWrite else { return CommittedChanges() }
        let grown = try database.transaction(using: transactionStatements) { () throws(SQLiteError) -> Int in
            var added: [String: (count: Int64, bytes: Int64)] = [:]
            var stored: [String: UInt64] = [:]
            try Self.forEachChunk(of: batch) { (room, events) throws(SQLiteError) in
                var last: UInt64
                if let known = stored[room] { last = known } else { last = try lastStoredSeq(of: room) }
                for index in events.indices {
                    let seq = events[index].entry.seq
                    guard seq > last else {
                        throw SQLiteError(
                            operation: "commit", code: SQLITE_CONSTRAINT,
                            message: "event \(seq) of \(room) is not after the stored event \(last)")
                    }
                    last = seq
                }
                stored[room] = last
                let chunk = Self.encodedChunk(of: events, room: room)
                try insert(chunk)
                added[room, default: (0, 0)].count += Int64(chunk.count)
                added[room, default: (0, 0)].bytes += Int64(chunk.bytes)
            }
            return try upsert(batch.rooms, adding: added)
        }
        let changes = CommittedChanges(grownBytes: grown, rooms: Set(batch.rooms.lazy.map(\.name)))
        counted? += grown
        roomsToCheck?.formUnion(changes.rooms)
        return changes
    }

    /// Writes `rooms`' records, each room's counts grown by what `added` says its new events
    /// count for; returns how much the counted total grew by.
    private func upsert(_ rooms: [RoomRecord], adding added: [String: (count: Int64, bytes: Int64)]) throws(SQLiteError) -> Int {
        var grown = 0
        for room in rooms {
            let counts = added[room.name] ?? (0, 0)
            let rowBytes = room.storedBytes
            grown += rowBytes - (try storedCounts(of: room.name)?.rowBytes ?? 0) + Int(counts.bytes)
            try upsertRoom.bind(
                .text(room.name), .integer(Int64(bitPattern: room.epoch)), .integer(Int64(bitPattern: room.lastSeq)),
                .text(room.topic?.text), .text(room.topic?.setBy),
                room.topic.map { .integer(Int64(bitPattern: $0.time)) } ?? .text(nil),
                room.topic.map { .integer(Int64(bitPattern: $0.seq)) } ?? .text(nil),
                .integer(Int64(bitPattern: room.lastActive)), .integer(counts.count), .integer(counts.bytes),
                .integer(Int64(rowBytes)))
            try upsertRoom.run()
        }
        return grown
    }

    // MARK: Writing what the journal holds

    /// `batch`'s events as the chunks `commit` would write, for a journal record
    /// (`RoomJournal.Record`): each event encoded once, here.
    public static func encodedChunks(of batch: LogBatch) -> [EncodedChunk] {
        var chunks: [EncodedChunk] = []
        forEachChunk(of: batch) { room, events in chunks.append(encodedChunk(of: events, room: room)) }
        return chunks
    }

    /// Writes `records` (a journal's, in the order appended) in one transaction: all of it, or
    /// (throwing) none of it. A chunk whose events the room already stores is left out, so the
    /// records a restart replays may include some the database took in before it stopped; a
    /// chunk that overlaps what is stored is refused (SQLITE_CONSTRAINT). Each room's record is
    /// its latest. Returns what it changed, as `commit` does.
    ///
    /// A room's consecutive chunks are joined into one row while it stays within `maxEvents` and
    /// `maxBytes` of blob (`EventChunk.append`): a busy room's hundred commits of a tenth of a
    /// second become a row or two, not a hundred, and the rows, index entries and log pages
    /// the transaction writes follow the bytes stored, not the commits.
    ///
    /// `firstJournalFile`: the journal files before it are taken in with this transaction
    /// (`JournalState.firstFile`).
    @discardableResult
    public func apply(_ records: [RoomJournal.Record], firstJournalFile: UInt64? = nil) throws(SQLiteError) -> CommittedChanges {
        var rooms: [RoomRecord] = []
        var roomIndex: [String: Int] = [:]
        for record in records {
            for room in record.rooms {
                if let index = roomIndex[room.name] {
                    rooms[index] = room
                } else {
                    roomIndex[room.name] = rooms.count
                    rooms.append(room)
                }
            }
        }
        guard !rooms.isEmpty || records.contains(where: { !$0.chunks.isEmpty }) || firstJournalFile != nil else {
            return CommittedChanges()
        }
        let grown = try database.transaction(using: transactionStatements) { () throws(SQLiteError) -> Int in
            if let firstJournalFile {
                try database.execute("UPDATE journal_state SET first_file = \(Int64(bitPattern: firstJournalFile))")
            }
            var added: [String: (count: Int64, bytes: Int64)] = [:]
            var stored: [String: UInt64] = [:]
            // Per room, the row being joined from its chunks, written once it is full.
            var joining: [String: EncodedChunk] = [:]
            for record in records {
                for chunk in record.chunks {
                    let last: UInt64
                    if let known = stored[chunk.room] { last = known } else { last = try lastStoredSeq(of: chunk.room) }
                    if chunk.lastSeq <= last { continue }
                    guard chunk.firstSeq > last else {
                        throw SQLiteError(
                            operation: "apply", code: SQLITE_CONSTRAINT,
                            message: "events \(chunk.firstSeq)–\(chunk.lastSeq) of \(chunk.room) overlap the stored event \(last)")
                    }
                    stored[chunk.room] = chunk.lastSeq
                    added[chunk.room, default: (0, 0)].count += Int64(chunk.count)
                    added[chunk.room, default: (0, 0)].bytes += Int64(chunk.bytes)
                    if var row = joining.removeValue(forKey: chunk.room) {
                        if row.count + chunk.count <= EventChunk.maxEvents, row.blob.count + chunk.blob.count <= EventChunk.maxBytes,
                            EventChunk.append(chunk.blob, firstSeq: chunk.firstSeq, to: &row.blob, after: row.lastSeq)
                        {
                            row.lastSeq = chunk.lastSeq
                            row.oldestTime = min(row.oldestTime, chunk.oldestTime)
                            row.count += chunk.count
                            row.bytes += chunk.bytes
                            joining[chunk.room] = row
                            continue
                        }
                        try insert(row)
                    }
                    joining[chunk.room] = chunk
                }
            }
            // In key order: neighbouring rows of the table's B-tree.
            for room in joining.keys.sorted() { try insert(joining[room]!) }
            return try upsert(rooms, adding: added)
        }
        let changes = CommittedChanges(grownBytes: grown, rooms: Set(rooms.lazy.map(\.name)))
        counted? += grown
        roomsToCheck?.formUnion(changes.rooms)
        return changes
    }

    // MARK: The journal's state

    /// What the database knows of the journal in front of it (`SQLiteRoomStore`), so that a start
    /// can tell whether the journal it finds holds everything the last run acknowledged — or
    /// whether some of that may be gone, and the rooms must move to a new epoch rather than
    /// number new events with `seq`s clients already saw (docs/SERVER.md, "Replay").
    public struct JournalState: Sendable, Equatable {
        /// The first journal file the database has not taken in: it and every file after it,
        /// numbered without a gap up to the last, must be there, each with its header (the store
        /// creates a file as soon as the one before it ends).
        public var firstFile: UInt64
        /// `/proc/sys/kernel/random/boot_id` of the run: another at the next start means the
        /// machine restarted, and what was written but not synced may be gone.
        public var bootID: String
        /// Whether the run stopped cleanly, its journal synced (`SQLiteRoomStore.close`).
        public var cleanStop: Bool
        /// Whether the run synced each record before acknowledging it (`--fsync always`).
        public var syncedEachRecord: Bool

        /// Describes a run's journal.
        public init(firstFile: UInt64, bootID: String, cleanStop: Bool, syncedEachRecord: Bool) {
            self.firstFile = firstFile
            self.bootID = bootID
            self.cleanStop = cleanStop
            self.syncedEachRecord = syncedEachRecord
        }
    }

    static let journalStateSQL = """
        CREATE TABLE IF NOT EXISTS journal_state(
            id INTEGER PRIMARY KEY CHECK(id = 1),
            first_file INTEGER NOT NULL,
            boot_id TEXT NOT NULL,
            clean_stop INTEGER NOT NULL,
            synced_each INTEGER NOT NULL
        )
        """

    /// The journal's state the last run left; nil if no run kept one (a new database, or one
    /// from before the journal had it).
    public func journalState() throws(SQLiteError) -> JournalState? {
        let select = try database.prepare("SELECT first_file, boot_id, clean_stop, synced_each FROM journal_state WHERE id = 1")
        guard try select.step() else { return nil }
        return JournalState(
            firstFile: select.uint64(0), bootID: select.text(1), cleanStop: select.int64(2) != 0, syncedEachRecord: select.int64(3) != 0)
    }

    /// Records `state` (a run starting), in a transaction of its own.
    public func setJournalState(_ state: JournalState) throws(SQLiteError) {
        let upsert = try database.prepare(
            "INSERT OR REPLACE INTO journal_state(id, first_file, boot_id, clean_stop, synced_each) VALUES(1, ?1, ?2, ?3, ?4)")
        try upsert.bind(
            .integer(Int64(bitPattern: state.firstFile)), .text(state.bootID), .integer(state.cleanStop ? 1 : 0),
            .integer(state.syncedEachRecord ? 1 : 0))
        _ = try upsert.step()
    }

    /// The `bootID` a backup writes into its copy (`markBackupCopy`): a server started on the
    /// copy gives every room a new epoch, since clients may have seen events after the backup,
    /// numbered with `seq`s the restored rooms will give again.
    public static let backupCopyBootID = "backup-copy"

    /// Marks this database as a backup's copy, its journal applied (`DataDirectoryCopy.backup`):
    /// the first start on it gives every room a new epoch (`SQLiteRoomStore`'s replay).
    public func markBackupCopy() throws(SQLiteError) {
        try database.execute(Self.journalStateSQL)
        try setJournalState(JournalState(firstFile: 1, bootID: Self.backupCopyBootID, cleanStop: true, syncedEachRecord: true))
    }

    /// Records that the run stopped cleanly, its journal synced.
    public func markCleanStop() throws(SQLiteError) {
        try database.execute("UPDATE journal_state SET clean_stop = 1")
    }

    /// Gives every stored room a new epoch (random, odd so never 0), in one transaction; returns
    /// how many rooms moved. For a start that cannot prove the journal held everything
    /// acknowledged: events some clients saw may be gone, and the `seq`s that named them will
    /// name others, so clients must see the break (PROTOCOL.md, room epochs).
    @discardableResult
    public func renewEpochs() throws(SQLiteError) -> Int {
        try database.execute("UPDATE rooms SET epoch = random() | 1")
        return Int(try database.integer("SELECT changes()") ?? 0)
    }

    /// Inserts `chunk` as one `event_chunks` row.
    private func insert(_ chunk: EncodedChunk) throws(SQLiteError) { try Self.insert(chunk, with: insertChunk) }

    /// A stored room's counted bytes and events, and when it was last active; nil if it has no row.
    private func storedCounts(of room: String) throws(SQLiteError) -> StoredCounts? {
        defer { selectRoomCounts.reset() }
        try selectRoomCounts.bind(.text(room))
        guard try selectRoomCounts.step() else { return nil }
        return StoredCounts(
            name: room, rowBytes: Int(selectRoomCounts.int64(0)), eventCount: Int(selectRoomCounts.int64(1)),
            eventBytes: Int(selectRoomCounts.int64(2)), lastActive: selectRoomCounts.uint64(3))
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

    /// Deletes up to `maxDeletions` events and rooms that `policy` no longer keeps, in one
    /// transaction, and gives the freed pages back to the file system. Rooms for which
    /// `isOccupied` is true (they have members) are never deleted, however long they have been
    /// quiet. Returns how many events and rooms it deleted: call again while that is
    /// `maxDeletions` (a commit may run in between).
    public func applyRetention(
        _ policy: RetentionPolicy, now: UInt64, maxDeletions: Int, isOccupied: (String) -> Bool = { _ in false }
    ) throws(SQLiteError) -> Int {
        let deleted: Int
        do {
            deleted = try database.transaction(using: transactionStatements) { () throws(SQLiteError) -> Int in
                var left = maxDeletions
                if policy.maxAgeMillis > 0, left > 0 {
                    left -= try trimByAge(before: now > policy.maxAgeMillis ? now - policy.maxAgeMillis : 0, limit: left)
                }
                if policy.maxEventsPerRoom > 0 || policy.maxBytesPerRoom > 0, left > 0 {
                    left -= try trimRooms(policy, limit: left)
                }
                if policy.maxEmptyRoomMillis > 0, left > 0 {
                    let cutoff = now > policy.maxEmptyRoomMillis ? now - policy.maxEmptyRoomMillis : 0
                    left -= try deleteEmptyRooms(idleBefore: cutoff, now: now, limit: left, isOccupied: isOccupied)
                }
                if policy.maxTotalBytes > 0, left > 0 {
                    left -= try trimTotal(to: policy.maxTotalBytes, now: now, limit: left, isOccupied: isOccupied)
                }
                return maxDeletions - left
            }
        } catch {
            // Rolled back: what this transaction changed in the running counts did not happen.
            counted = nil
            roomsToCheck = nil
            throw error
        }
        if deleted > 0 { try database.execute("PRAGMA incremental_vacuum") }
        return deleted
    }

    /// What everything stored counts for against `maxTotalBytes`: each room's row and events,
    /// added up from the rows (retention keeps a running count instead).
    public func totalBytes() throws(SQLiteError) -> Int {
        Int(try database.integer("SELECT coalesce(sum(row_bytes + event_bytes), 0) FROM rooms") ?? 0)
    }

    /// Whether everything stored counts for more than `policy`'s total bound: retention has
    /// work to do now, not at its next pass.
    public func isOverTotal(_ policy: RetentionPolicy) throws(SQLiteError) -> Bool {
        guard policy.maxTotalBytes > 0 else { return false }
        return try countedBytes() > policy.maxTotalBytes
    }

    /// The running count of `totalBytes`, added up once when unknown.
    private func countedBytes() throws(SQLiteError) -> Int {
        if let counted { return counted }
        let total = try totalBytes()
        counted = total
        return total
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

    /// Deletes the oldest events of rooms over the per-room bounds (a room's row counts in its
    /// bytes). Looks only at the rooms commits changed since it last looked; at every room once.
    private func trimRooms(_ policy: RetentionPolicy, limit: Int) throws(SQLiteError) -> Int {
        let maxCount = policy.maxEventsPerRoom > 0 ? policy.maxEventsPerRoom : Int.max
        let maxBytes = policy.maxBytesPerRoom > 0 ? policy.maxBytesPerRoom : Int.max
        if roomsToCheck == nil {
            let over = try database.prepare("SELECT name FROM rooms WHERE event_count > ?1 OR event_bytes + row_bytes > ?2")
            try over.bind(.integer(Int64(maxCount)), .integer(Int64(maxBytes)))
            var names: Set<String> = []
            while try over.step() { names.insert(over.text(0)) }
            roomsToCheck = names
        }
        var left = limit
        for name in roomsToCheck ?? [] {
            guard left > 0 else { break }
            if let room = try storedCounts(of: name) {
                var count = room.eventCount
                var bytes = room.eventBytes + room.rowBytes
                while left > 0, count > maxCount || bytes > maxBytes {
                    let rows = try chunkRows(
                        "SELECT room, first_seq, events FROM event_chunks WHERE room = ?1 ORDER BY first_seq LIMIT 4", .text(name))
                    guard !rows.isEmpty else { break }
                    for row in rows where left > 0 {
                        left -= try remove(from: row, limit: left) { entry in
                            guard count > maxCount || bytes > maxBytes else { return false }
                            count -= 1
                            bytes -= StoredEvent.storedBytes(room: name, entry: entry)
                            return true
                        }
                    }
                }
                // Cut short by the limit: looked at again next step.
                if left == 0, count > maxCount || bytes > maxBytes { break }
            }
            roomsToCheck?.remove(name)
        }
        return limit - left
    }

    /// Deletes the rooms last active before `cutoff`, with their events, at most `limit` events
    /// and rooms; an occupied one is marked active `now` instead, so it is not looked at again
    /// for as long.
    private func deleteEmptyRooms(
        idleBefore cutoff: UInt64, now: UInt64, limit: Int, isOccupied: (String) -> Bool
    ) throws(SQLiteError) -> Int {
        let select = try database.prepare(
            "SELECT name, row_bytes, event_count, event_bytes, last_active FROM rooms WHERE last_active < ?1 ORDER BY last_active LIMIT 16")
        var left = limit
        while left > 0 {
            let rooms = try roomRows(select, .integer(Int64(bitPattern: cutoff)))
            for room in rooms where left > 0 {
                if isOccupied(room.name) {
                    try touch(room.name, now: now)
                } else {
                    left -= try deleteRoom(room, limit: left)
                }
            }
            if rooms.count < 16 { break }
        }
        return limit - left
    }

    /// While everything counts for more than `maxTotal`, deletes the oldest thing stored: the
    /// globally oldest events, or, when its last activity is as old or older, the least recently
    /// active room without members, with anything it holds. (A room's events are never newer than
    /// its last activity, so such a room holds no event newer than any left elsewhere.)
    private func trimTotal(
        to maxTotal: Int, now: UInt64, limit: Int, isOccupied: (String) -> Bool
    ) throws(SQLiteError) -> Int {
        // Rooms active in this very millisecond are left for the next pass: an occupied room is
        // marked active now, and must not be found again in this one.
        let leastActive = try database.prepare(
            "SELECT name, row_bytes, event_count, event_bytes, last_active FROM rooms WHERE last_active < ?1 ORDER BY last_active LIMIT 1")
        var left = limit
        while left > 0 {
            var excess = try countedBytes() - maxTotal
            guard excess > 0 else { break }
            var room = try roomRows(leastActive, .integer(Int64(bitPattern: now))).first
            if let occupied = room, isOccupied(occupied.name) {
                try touch(occupied.name, now: now)
                continue
            }
            let chunk = try chunkRows("SELECT room, first_seq, events FROM event_chunks ORDER BY oldest_time LIMIT 1").first
            if let oldest = chunk, let candidate = room, oldest.chunk.oldestTime < candidate.lastActive { room = nil }
            if let room {
                left -= try deleteRoom(room, limit: left)
            } else if let chunk {
                left -= try remove(from: chunk, limit: left) { entry in
                    guard excess > 0 else { return false }
                    excess -= StoredEvent.storedBytes(room: chunk.room, entry: entry)
                    return true
                }
            } else {
                // Only occupied rooms' rows are left: they stay while they have members.
                break
            }
        }
        return limit - left
    }

    /// Deletes `room`'s events, oldest first, and then its row, at most `limit` of them (the row
    /// counts as one); returns how many. A room cut short keeps its row for the next step.
    private func deleteRoom(_ room: StoredCounts, limit: Int) throws(SQLiteError) -> Int {
        var left = limit
        if room.eventCount < left {
            try deleteRoomChunks.bind(.text(room.name))
            try deleteRoomChunks.run()
            left -= room.eventCount
            counted? -= room.eventBytes
        } else {
            while left > 0 {
                let rows = try chunkRows(
                    "SELECT room, first_seq, events FROM event_chunks WHERE room = ?1 ORDER BY first_seq LIMIT 4", .text(room.name))
                guard !rows.isEmpty else { break }
                for row in rows where left > 0 { left -= try remove(from: row, limit: left) { _ in true } }
            }
            guard left > 0 else { return limit }
            // Whatever the loop deleted, `remove` took off the room's counts and the running count.
            let remaining = try storedCounts(of: room.name)?.eventBytes ?? 0
            try deleteRoomChunks.bind(.text(room.name))
            try deleteRoomChunks.run()
            counted? -= remaining
        }
        try deleteRoomRow.bind(.text(room.name))
        try deleteRoomRow.run()
        counted? -= room.rowBytes
        roomsToCheck?.remove(room.name)
        return limit - left + 1
    }

    /// Marks `room` active at `now`.
    private func touch(_ room: String, now: UInt64) throws(SQLiteError) {
        try touchRoom.bind(.text(room), .integer(Int64(bitPattern: now)))
        try touchRoom.run()
    }

    /// A room's row as retention sees it: what it counts for, and when it was last active.
    private struct StoredCounts {
        var name: String
        var rowBytes: Int
        var eventCount: Int
        var eventBytes: Int
        var lastActive: UInt64
    }

    /// The rooms `select` (name, row_bytes, event_count, event_bytes, last_active) returns for
    /// `bindings`, read in full before any is changed; resets the statement.
    private func roomRows(_ select: SQLiteStatement, _ bindings: SQLiteValue...) throws(SQLiteError) -> [StoredCounts] {
        defer { select.reset() }
        try select.bind(bindings)
        var rooms: [StoredCounts] = []
        while try select.step() {
            rooms.append(
                StoredCounts(
                    name: select.text(0), rowBytes: Int(select.int64(1)), eventCount: Int(select.int64(2)),
                    eventBytes: Int(select.int64(3)), lastActive: select.uint64(4)))
        }
        return rooms
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
        counted? -= removedBytes
        return removed
    }
}

/// What a commit changed: the bytes it added against `RetentionPolicy.maxTotalBytes` and the
/// rooms whose counts it changed.
public struct CommittedChanges: Sendable, Equatable {
    /// Bytes added to what everything stored counts for (less, if rows shrank).
    public var grownBytes: Int
    /// The rooms whose rows the commits wrote.
    public var rooms: Set<String>

    /// Changes of `grownBytes` to `rooms`; nothing by default.
    public init(grownBytes: Int = 0, rooms: Set<String> = []) {
        self.grownBytes = grownBytes
        self.rooms = rooms
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
