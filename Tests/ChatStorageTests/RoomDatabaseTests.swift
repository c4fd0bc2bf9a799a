import ChatCore
import CSQLite
import ChatProtocol
import ChatStorage
import Glibc
import TestSupport
import Testing

func message(_ seq: UInt64, _ text: String, time: UInt64 = 1_000, sender: String = "alice") -> HistoryEntry {
    HistoryEntry(kind: .message, seq: seq, time: time, sender: sender, text: text)
}

/// A batch that adds `entries` to `room` and sets its last `seq` to the last entry's.
func batch(_ room: String, epoch: UInt64 = 7, _ entries: [HistoryEntry], lastSeq: UInt64? = nil) -> LogBatch {
    let last = lastSeq ?? entries.last?.seq ?? 0
    return LogBatch(
        rooms: [RoomRecord(name: room, epoch: epoch, lastSeq: last, topic: nil, lastActive: entries.last?.time ?? 0)],
        events: entries.map { StoredEvent(room: room, entry: $0) })
}

@Suite("Rooms in SQLite", .serialized)
struct RoomDatabaseTests {
    @Test func createsTheSchemaAndReadsBackWhatWasCommittedAfterReopening() throws {
        let directory = try TemporaryDirectory(prefix: "chat-storage")
        defer { directory.remove() }
        let path = directory.path + "/rooms.sqlite3"
        do {
            let database = try RoomDatabase(path: path, durability: .normal, create: true)
            try database.commit(batch("general", [message(1, "one"), message(3, "three")], lastSeq: 4))
            let topic = RoomTopic(text: "sockets", setBy: "bob", time: 2_000, seq: 5)
            try database.commit(
                LogBatch(
                    rooms: [RoomRecord(name: "general", epoch: 7, lastSeq: 5, topic: topic, lastActive: 2_000)],
                    events: [StoredEvent(room: "general", entry: HistoryEntry(kind: .topic, seq: 5, time: 2_000, sender: "bob", text: "sockets"))]))
        }
        let reopened = try RoomDatabase(path: path, durability: .normal, create: false)
        let room = try #require(try reopened.loadRoom(named: "general", recent: 2))
        #expect(room.record.epoch == 7, "the epoch survives")
        #expect(room.record.lastSeq == 5, "seq continues where it stopped, presence seqs included")
        #expect(room.record.topic == RoomTopic(text: "sockets", setBy: "bob", time: 2_000, seq: 5))
        #expect(room.firstSeq == 1)
        #expect(room.recent.map(\.seq) == [3, 5], "the two newest events, oldest first")
        #expect(try reopened.loadRoom(named: "other", recent: 10) == nil)
        #expect(try reopened.database.integer("PRAGMA user_version") == RoomDatabase.schemaVersion)
        #expect(try reopened.database.text("PRAGMA journal_mode") == "wal")
    }

    @Test func aBatchIsWrittenWholeOrNotAtAll() throws {
        let directory = try TemporaryDirectory(prefix: "chat-storage")
        defer { directory.remove() }
        let database = try RoomDatabase(path: directory.path + "/rooms.sqlite3", durability: .normal, create: true)
        try database.commit(batch("general", [message(1, "one")]))
        // seq 1 again violates the key: the whole batch, its new seq 2 included, must roll back.
        #expect(throws: SQLiteError.self) {
            try database.commit(batch("general", [message(2, "two"), message(1, "again")]))
        }
        let room = try #require(try database.loadRoom(named: "general", recent: 10))
        #expect(room.recent.map(\.text) == ["one"], "nothing of the failed batch is stored")
        #expect(room.record.lastSeq == 1)
    }

    @Test func pagesBackwardAndForwardWithinLimitAndBudget() throws {
        let directory = try TemporaryDirectory(prefix: "chat-storage")
        defer { directory.remove() }
        let database = try RoomDatabase(path: directory.path + "/rooms.sqlite3", durability: .off, create: true)
        try database.commit(batch("r", (1...10).map { message($0 * 2, "m\($0)") }))
        let newest = try database.page(of: "r", .before, from: 0, limit: 3, budget: .max, cost: { _ in 1 })
        #expect(newest.entries.map(\.seq) == [16, 18, 20])
        #expect(!newest.complete)
        let oldest = try database.page(of: "r", .before, from: 5, limit: 3, budget: .max, cost: { _ in 1 })
        #expect(oldest.entries.map(\.seq) == [2, 4])
        #expect(oldest.complete, "nothing older than seq 2")
        let after = try database.page(of: "r", .after, from: 15, limit: 10, budget: .max, cost: { _ in 1 })
        #expect(after.entries.map(\.seq) == [16, 18, 20])
        #expect(after.complete)
        let exact = try database.page(of: "r", .after, from: 14, limit: 3, budget: .max, cost: { _ in 1 })
        #expect(exact.entries.map(\.seq) == [16, 18, 20])
        #expect(exact.complete, "the limit reached exactly the newest: nothing lies beyond")
        let budgeted = try database.page(of: "r", .after, from: 0, limit: 10, budget: 25, cost: { _ in 10 })
        #expect(budgeted.entries.map(\.seq) == [2, 4], "two entries of cost 10 fit a budget of 25")
        #expect(!budgeted.complete)
        let oversize = try database.page(of: "r", .after, from: 0, limit: 10, budget: 5, cost: { _ in 10 })
        #expect(oversize.entries.map(\.seq) == [2], "at least one entry, even over the budget")
    }

    @Test func refusesAFileThatIsNotADatabase() throws {
        let directory = try TemporaryDirectory(prefix: "chat-storage")
        defer { directory.remove() }
        let path = directory.path + "/rooms.sqlite3"
        let garbage = String(repeating: "this is not a database. ", count: 400)
        let file = fopen(path, "w")!
        fputs(garbage, file)
        fclose(file)
        let error = #expect(throws: StorageError.self) {
            _ = try RoomDatabase(path: path, durability: .normal, create: true)
        }
        #expect(error?.message.contains(path) == true, "names the file: \(error?.message ?? "")")
        #expect(error?.message.contains("not a database") == true, "says what is wrong: \(error?.message ?? "")")
    }

    @Test func refusesANewerSchema() throws {
        let directory = try TemporaryDirectory(prefix: "chat-storage")
        defer { directory.remove() }
        let path = directory.path + "/rooms.sqlite3"
        do {
            let database = try RoomDatabase(path: path, durability: .normal, create: true)
            try database.database.execute("PRAGMA user_version = \(RoomDatabase.schemaVersion + 1)")
        }
        let error = #expect(throws: StorageError.self) {
            _ = try RoomDatabase(path: path, durability: .normal, create: true)
        }
        #expect(error?.message.contains("schema version \(RoomDatabase.schemaVersion + 1)") == true, "\(error?.message ?? "")")
        #expect(error?.message.contains("newer chat-server") == true)
    }

    @Test func reportsAFullDatabaseAndKeepsWhatWasCommitted() throws {
        let directory = try TemporaryDirectory(prefix: "chat-storage")
        defer { directory.remove() }
        let database = try RoomDatabase(path: directory.path + "/rooms.sqlite3", durability: .normal, create: true)
        try database.commit(batch("r", [message(1, "kept")]))
        let pages = try #require(try database.database.integer("PRAGMA page_count"))
        try database.database.execute("PRAGMA max_page_count = \(pages)")
        let big = String(repeating: "x", count: 3_000)
        var seq: UInt64 = 2
        var failure: SQLiteError?
        // Each commit needs new pages; within a few the file is at its cap.
        while failure == nil, seq < 200 {
            do {
                try database.commit(batch("r", [message(seq, big)]))
                seq += 1
            } catch {
                failure = error
            }
        }
        let error = try #require(failure, "a database capped at its size must fill up")
        #expect(error.isFull, "SQLITE_FULL, not \(error)")
        #expect(error.description.contains("full"), "\(error)")
        let room = try #require(try database.loadRoom(named: "r", recent: 1_000))
        #expect(room.recent.count == Int(seq) - 1, "every commit before the failure is there, and nothing of it")
        #expect(room.record.lastSeq == seq - 1)
        try database.database.execute("PRAGMA max_page_count = 1000000")
        try database.commit(batch("r", [message(seq, big)]))
        #expect(try database.loadRoom(named: "r", recent: 1)?.recent.first?.seq == seq, "writes work again once there is room")
    }

    @Test func retentionKeepsTheNewestEventsPerRoomByCount() throws {
        let directory = try TemporaryDirectory(prefix: "chat-storage")
        defer { directory.remove() }
        let database = try RoomDatabase(path: directory.path + "/rooms.sqlite3", durability: .off, create: true)
        try database.commit(batch("big", (1...50).map { message($0, "m\($0)") }))
        try database.commit(batch("small", (1...3).map { message($0, "s\($0)") }))
        let policy = RetentionPolicy(maxEventsPerRoom: 10, maxBytesPerRoom: 0, maxAgeMillis: 0, maxTotalBytes: 0)
        var deleted = 0
        while true {
            let step = try database.applyRetention(policy, now: 5_000, maxDeletions: 7)
            #expect(step <= 7, "one step deletes at most what it was allowed")
            deleted += step
            if step < 7 { break }
        }
        #expect(deleted == 40)
        let big = try #require(try database.loadRoom(named: "big", recent: 100))
        #expect(big.recent.map(\.seq) == Array(41...50))
        #expect(big.firstSeq == 41)
        #expect(big.record.lastSeq == 50, "retention never moves seq back")
        #expect(try database.loadRoom(named: "small", recent: 100)?.recent.count == 3)
        #expect(try database.applyRetention(policy, now: 5_000, maxDeletions: 100) == 0, "nothing left to delete")
    }

    @Test func retentionByBytesPerRoomAndInTotal() throws {
        let directory = try TemporaryDirectory(prefix: "chat-storage")
        defer { directory.remove() }
        let database = try RoomDatabase(path: directory.path + "/rooms.sqlite3", durability: .off, create: true)
        let text = String(repeating: "y", count: 100)
        // Each event counts 32 + 1 (room) + 5 (sender) + 100 = 138 bytes, each room's row 96 + 2 × 1.
        let row = RoomRecord.rowOverhead + 2
        try database.commit(batch("a", (1...20).map { message($0, text, time: $0) }))
        try database.commit(batch("b", (1...20).map { message($0, text, time: 100 + $0) }))
        #expect(try database.totalBytes() == 40 * 138 + 2 * row)
        let perRoom = RetentionPolicy(maxEventsPerRoom: 0, maxBytesPerRoom: 138 * 5 + row, maxAgeMillis: 0, maxTotalBytes: 0)
        _ = try database.applyRetention(perRoom, now: 1_000, maxDeletions: 1_000)
        #expect(try database.loadRoom(named: "a", recent: 100)?.recent.map(\.seq) == Array(16...20))
        #expect(try database.loadRoom(named: "b", recent: 100)?.recent.map(\.seq) == Array(16...20))
        // Now the total, the two rows included: keep six events in all.
        let total = RetentionPolicy(maxEventsPerRoom: 0, maxBytesPerRoom: 0, maxAgeMillis: 0, maxTotalBytes: 138 * 6 + 2 * row)
        _ = try database.applyRetention(total, now: 1_000, maxDeletions: 1_000)
        #expect(try database.totalBytes() == 138 * 6 + 2 * row)
        #expect(try database.loadRoom(named: "a", recent: 100)?.recent.map(\.seq) == [20], "a's events are older: they go first")
        #expect(try database.loadRoom(named: "b", recent: 100)?.recent.map(\.seq) == Array(16...20))
    }

    @Test func retentionByAgeKeepsTheRoomsItEmpties() throws {
        let directory = try TemporaryDirectory(prefix: "chat-storage")
        defer { directory.remove() }
        let database = try RoomDatabase(path: directory.path + "/rooms.sqlite3", durability: .off, create: true)
        try database.commit(batch("old", [message(1, "a", time: 1_000), message(2, "b", time: 2_000)]))
        try database.commit(batch("new", [message(1, "c", time: 9_000)]))
        let policy = RetentionPolicy(maxEventsPerRoom: 0, maxBytesPerRoom: 0, maxAgeMillis: 5_000, maxTotalBytes: 0)
        _ = try database.applyRetention(policy, now: 10_000, maxDeletions: 100)
        let old = try #require(try database.loadRoom(named: "old", recent: 10), "without an empty-room time the room stays")
        #expect(old.recent.isEmpty, "its events are past the age")
        #expect(old.record.epoch == 7 && old.record.lastSeq == 2)
        #expect(try database.loadRoom(named: "new", recent: 10)?.recent.map(\.text) == ["c"])
    }

    @Test func roomsIdlePastTheEmptyRoomTimeAreDeletedWithTheirEventsUnlessOccupied() throws {
        let directory = try TemporaryDirectory(prefix: "chat-storage")
        defer { directory.remove() }
        let database = try RoomDatabase(path: directory.path + "/rooms.sqlite3", durability: .off, create: true)
        let topic = RoomTopic(text: String(repeating: "t", count: 16_000), setBy: "mallory", time: 1_000, seq: 2)
        for name in ["oneshot", "quiet"] {
            try database.commit(
                LogBatch(
                    rooms: [RoomRecord(name: name, epoch: 7, lastSeq: 3, topic: topic, lastActive: 1_500)],
                    events: [StoredEvent(room: name, entry: HistoryEntry(kind: .topic, seq: 2, time: 1_000, sender: "mallory", text: topic.text))]))
        }
        try database.commit(batch("recent", [message(1, "hello", time: 9_000)]))
        let policy = RetentionPolicy(maxEventsPerRoom: 0, maxBytesPerRoom: 0, maxAgeMillis: 0, maxTotalBytes: 0, maxEmptyRoomMillis: 5_000)
        // "quiet" has a member who says nothing: it is not empty, however long it stays quiet.
        let deleted = try database.applyRetention(policy, now: 10_000, maxDeletions: 100) { $0 == "quiet" }
        #expect(deleted == 2, "one room and its one event")
        #expect(try database.loadRoom(named: "oneshot", recent: 10) == nil, "a room idle past the time is gone, topic and all")
        #expect(try database.loadRoom(named: "quiet", recent: 10)?.record.topic == topic, "an occupied room stays")
        #expect(try database.loadRoom(named: "recent", recent: 10)?.recent.map(\.text) == ["hello"], "a room active since stays")
        let quietBytes = RoomRecord.storedBytes(name: "quiet", topic: topic) + StoredEvent.storedBytes(
            room: "quiet", entry: HistoryEntry(kind: .topic, seq: 2, time: 1_000, sender: "mallory", text: topic.text))
        let recentBytes = RoomRecord.storedBytes(name: "recent", topic: nil) + StoredEvent(room: "recent", entry: message(1, "hello")).storedBytes
        #expect(try database.totalBytes() == quietBytes + recentBytes)
        // The occupied room counts as active from now: once empty, it gets the full time again.
        #expect(try database.applyRetention(policy, now: 14_000, maxDeletions: 100) == 0)
        #expect(try database.applyRetention(policy, now: 15_001, maxDeletions: 100) == 4, "then both rooms have idled long enough")
        #expect(try database.loadRoom(named: "quiet", recent: 10) == nil)
        // A room of a deleted name starts again from seq 1.
        try database.commit(batch("oneshot", epoch: 8, [message(1, "again", time: 16_000)]))
        #expect(try database.loadRoom(named: "oneshot", recent: 10)?.record.epoch == 8)
    }

    @Test func deletingABigRoomTakesSeveralStepsWithinTheirLimit() throws {
        let directory = try TemporaryDirectory(prefix: "chat-storage")
        defer { directory.remove() }
        let database = try RoomDatabase(path: directory.path + "/rooms.sqlite3", durability: .off, create: true)
        try database.commit(batch("big", (1...300).map { message($0, "m\($0)", time: 1_000) }))
        let policy = RetentionPolicy(maxEventsPerRoom: 0, maxBytesPerRoom: 0, maxAgeMillis: 0, maxTotalBytes: 0, maxEmptyRoomMillis: 1_000)
        var steps: [Int] = []
        while steps.count < 10 {
            let step = try database.applyRetention(policy, now: 5_000, maxDeletions: 128)
            steps.append(step)
            if step < 128 { break }
        }
        #expect(steps == [128, 128, 45], "300 events and the row, 128 at a time")
        #expect(try database.loadRoom(named: "big", recent: 10) == nil)
        #expect(try database.totalBytes() == 0)
    }

    @Test func topicsAndRoomRowsCountAgainstTheTotalAndTheOldestGoesFirst() throws {
        let directory = try TemporaryDirectory(prefix: "chat-storage")
        defer { directory.remove() }
        let database = try RoomDatabase(path: directory.path + "/rooms.sqlite3", durability: .off, create: true)
        let topic = RoomTopic(text: String(repeating: "t", count: 1_000), setBy: "mallory", time: 0, seq: 1)
        // Ten rooms with nothing but a topic in their row, one a millisecond, then a room that
        // talks at times 5 to 14: rooms older than its first event go before it.
        for index in 0..<10 {
            try database.commit(
                LogBatch(rooms: [RoomRecord(name: "r\(index)", epoch: 1, lastSeq: 2, topic: topic, lastActive: UInt64(index))]))
        }
        try database.commit(batch("chat", (1...10).map { message($0, "hello", time: 4 + $0) }))
        let roomBytes = RoomRecord.storedBytes(name: "r0", topic: topic)
        let eventBytes = StoredEvent(room: "chat", entry: message(1, "hello")).storedBytes
        let chatRow = RoomRecord.storedBytes(name: "chat", topic: nil)
        #expect(try database.totalBytes() == 10 * roomBytes + chatRow + 10 * eventBytes, "topics count")
        // Room for four topic rooms, the chat row and eight events: r0…r5 go (active at 0…5, no
        // later than the oldest event, at 5), then the chat's events at 5 and 6, older than r6…r9.
        let bound = 4 * roomBytes + chatRow + 8 * eventBytes
        let policy = RetentionPolicy(maxEventsPerRoom: 0, maxBytesPerRoom: 0, maxAgeMillis: 0, maxTotalBytes: bound)
        _ = try database.applyRetention(policy, now: 100, maxDeletions: 1_000)
        #expect(try database.totalBytes() <= bound)
        for index in 0..<5 { #expect(try database.loadRoom(named: "r\(index)", recent: 1) == nil, "r\(index) is older than every event") }
        #expect(try database.loadRoom(named: "r5", recent: 1) == nil, "r5 (5) is as old as the oldest event: rooms go first")
        #expect(try database.loadRoom(named: "chat", recent: 100)?.recent.map(\.seq) == Array(3...10))
        for index in 6..<10 { #expect(try database.loadRoom(named: "r\(index)", recent: 1)?.record.topic == topic) }
    }

    @Test func theRunningCountFollowsATopicThatShrinks() throws {
        let directory = try TemporaryDirectory(prefix: "chat-storage")
        defer { directory.remove() }
        let database = try RoomDatabase(path: directory.path + "/rooms.sqlite3", durability: .off, create: true)
        let policy = RetentionPolicy(maxEventsPerRoom: 0, maxBytesPerRoom: 0, maxAgeMillis: 0, maxTotalBytes: 1_000)
        // Retention counts once, then follows commits: a count that missed the shrink would
        // think the room over the bound and delete it.
        #expect(try database.applyRetention(policy, now: 10, maxDeletions: 10) == 0)
        let topic = RoomTopic(text: String(repeating: "t", count: 10_000), setBy: "ann", time: 1, seq: 1)
        try database.commit(LogBatch(rooms: [RoomRecord(name: "room", epoch: 1, lastSeq: 1, topic: topic, lastActive: 1)]))
        try database.commit(LogBatch(rooms: [RoomRecord(name: "room", epoch: 1, lastSeq: 2, topic: nil, lastActive: 2)]))
        #expect(try database.applyRetention(policy, now: 10, maxDeletions: 10) == 0)
        #expect(try database.loadRoom(named: "room", recent: 0) != nil)
        try database.commit(LogBatch(rooms: [RoomRecord(name: "room", epoch: 1, lastSeq: 3, topic: topic, lastActive: 3)]))
        #expect(try database.applyRetention(policy, now: 10, maxDeletions: 10) == 1, "and one that missed the growth would keep it")
        #expect(try database.totalBytes() == 0)
    }

    @Test func aVersion2FileIsConvertedWithEachRoomCounted() throws {
        let directory = try TemporaryDirectory(prefix: "chat-storage")
        defer { directory.remove() }
        let path = directory.path + "/rooms.sqlite3"
        do {
            // The rooms table of version 2: the topic before the counts, no counted bytes.
            let old = try SQLiteDatabase(path: path, mode: .readWriteCreate)
            try old.execute(
                """
                PRAGMA auto_vacuum=INCREMENTAL;
                CREATE TABLE rooms(name TEXT PRIMARY KEY NOT NULL, epoch INTEGER NOT NULL, last_seq INTEGER NOT NULL,
                    topic_text TEXT, topic_set_by TEXT, topic_time INTEGER, topic_seq INTEGER, last_active INTEGER NOT NULL,
                    event_count INTEGER NOT NULL, event_bytes INTEGER NOT NULL) WITHOUT ROWID;
                CREATE TABLE event_chunks(room TEXT NOT NULL, first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL,
                    oldest_time INTEGER NOT NULL, event_count INTEGER NOT NULL, event_bytes INTEGER NOT NULL,
                    events BLOB NOT NULL, PRIMARY KEY(room, first_seq)) WITHOUT ROWID;
                CREATE INDEX event_chunks_by_time ON event_chunks(oldest_time);
                INSERT INTO rooms VALUES('café', 9, 5, 'sujet', 'ann', 3, 2, 300, 0, 0);
                INSERT INTO rooms VALUES('bare', 8, 4, NULL, NULL, NULL, NULL, 7, 0, 0);
                PRAGMA user_version = 2;
                """)
        }
        let database = try RoomDatabase(path: path, durability: .normal, create: true)
        #expect(try database.database.integer("PRAGMA user_version") == RoomDatabase.schemaVersion)
        let topic = RoomTopic(text: "sujet", setBy: "ann", time: 3, seq: 2)
        let cafe = try #require(try database.loadRoom(named: "café", recent: 10))
        #expect(cafe.record == RoomRecord(name: "café", epoch: 9, lastSeq: 5, topic: topic, lastActive: 300))
        #expect(
            try database.totalBytes() == RoomRecord.storedBytes(name: "café", topic: topic) + RoomRecord.storedBytes(name: "bare", topic: nil),
            "each row counts its UTF-8 bytes, as a commit would")
        try database.commit(batch("bare", [message(5, "after")], lastSeq: 5))
        #expect(try database.loadRoom(named: "bare", recent: 1)?.recent.map(\.seq) == [5])
        _ = try RoomDatabase(path: path, durability: .normal, create: false)
    }

    @Test func aSecondServerCannotTakeTheSameDirectory() throws {
        let directory = try TemporaryDirectory(prefix: "chat-storage")
        defer { directory.remove() }
        let first = try DataDirectory(path: directory.path + "/nested/data")
        let error = #expect(throws: StorageError.self) { _ = try DataDirectory(path: first.path) }
        #expect(error?.message.contains("another chat-server") == true, "\(error?.message ?? "")")
        _ = first
    }

    @Test func refusesADirectoryItCannotWrite() throws {
        // Root may write anywhere: a file in the way is a refusal no user can override.
        let directory = try TemporaryDirectory(prefix: "chat-storage")
        defer { directory.remove() }
        let blocker = directory.path + "/file"
        fclose(fopen(blocker, "w"))
        let error = #expect(throws: StorageError.self) { _ = try DataDirectory(path: blocker + "/data") }
        #expect(error?.message.contains(blocker) == true, "\(error?.message ?? "")")
    }
}
