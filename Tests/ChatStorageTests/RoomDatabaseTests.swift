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
func batch(_ room: String, epoch: UInt64 = 7, _ entries: [HistoryEntry], lastSeq: UInt64? = nil) -> RoomBatch {
    let last = lastSeq ?? entries.last?.seq ?? 0
    return RoomBatch(
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
                RoomBatch(
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
        // Each event counts 32 + 1 (room) + 5 (sender) + 100 = 138 bytes.
        try database.commit(batch("a", (1...20).map { message($0, text, time: $0) }))
        try database.commit(batch("b", (1...20).map { message($0, text, time: 100 + $0) }))
        let perRoom = RetentionPolicy(maxEventsPerRoom: 0, maxBytesPerRoom: 138 * 5, maxAgeMillis: 0, maxTotalBytes: 0)
        _ = try database.applyRetention(perRoom, now: 1_000, maxDeletions: 1_000)
        #expect(try database.loadRoom(named: "a", recent: 100)?.recent.map(\.seq) == Array(16...20))
        #expect(try database.loadRoom(named: "b", recent: 100)?.recent.map(\.seq) == Array(16...20))
        // Now the total: room rows count 64 + name each; keep about six events in all.
        let total = RetentionPolicy(maxEventsPerRoom: 0, maxBytesPerRoom: 0, maxAgeMillis: 0, maxTotalBytes: 138 * 6 + 2 * 65)
        _ = try database.applyRetention(total, now: 1_000, maxDeletions: 1_000)
        #expect(try database.totalBytes() <= 138 * 6 + 2 * 65)
        #expect(try database.loadRoom(named: "a", recent: 100)?.recent.map(\.seq) == [20], "a's events are older: they go first")
        #expect(try database.loadRoom(named: "b", recent: 100)?.recent.map(\.seq) == Array(16...20))
    }

    @Test func retentionByAgeThenForgetsIdleEmptyRooms() throws {
        let directory = try TemporaryDirectory(prefix: "chat-storage")
        defer { directory.remove() }
        let database = try RoomDatabase(path: directory.path + "/rooms.sqlite3", durability: .off, create: true)
        try database.commit(batch("old", [message(1, "a", time: 1_000), message(2, "b", time: 2_000)]))
        try database.commit(batch("new", [message(1, "c", time: 9_000)]))
        let policy = RetentionPolicy(maxEventsPerRoom: 0, maxBytesPerRoom: 0, maxAgeMillis: 5_000, maxTotalBytes: 0)
        _ = try database.applyRetention(policy, now: 10_000, maxDeletions: 100)
        #expect(try database.loadRoom(named: "old", recent: 10) == nil, "an idle room with no events left is forgotten")
        #expect(try database.loadRoom(named: "new", recent: 10)?.recent.map(\.text) == ["c"])
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
