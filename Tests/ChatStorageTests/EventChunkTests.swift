import ChatCore
import CSQLite
import ChatProtocol
import ChatStorage
import TestSupport
import Testing

@Suite("Events stored in chunks", .serialized)
struct EventChunkTests {
    @Test func aChunkRoundTripsAndSplitsAtItsBounds() {
        let events: [HistoryEntry] = (1...300).map { (n: Int) -> HistoryEntry in
            let kind: HistoryEntry.Kind = n % 3 == 0 ? .action : .message
            return HistoryEntry(kind: kind, seq: UInt64(n * 2), time: UInt64(1_000 + n), sender: "nick\(n)", text: "héllo \(n)")
        }
        let chunks = EventChunk.split(events[...])
        #expect(chunks.map(\.events.count) == [128, 128, 44])
        #expect(chunks.flatMap(\.events) == events)
        for chunk in chunks {
            let blob = chunk.encoded()
            let decoded = blob.withUnsafeBytes { EventChunk.decode($0, firstSeq: chunk.firstSeq) }
            #expect(decoded == chunk)
        }
        let big = (1...10).map { HistoryEntry(kind: .message, seq: UInt64($0), time: 1, sender: "a", text: String(repeating: "x", count: 10_000)) }
        #expect(EventChunk.split(big[...]).map(\.events.count) == [3, 3, 3, 1], "about 32 KiB of text per chunk")
        let huge = [HistoryEntry(kind: .message, seq: 1, time: 1, sender: "a", text: String(repeating: "x", count: 100_000))]
        #expect(EventChunk.split(huge[...]).map(\.events.count) == [1], "an event larger than a chunk gets one of its own")
    }

    @Test func theBlobIsTheFormatFilesOnDiskHold() {
        // Byte for byte what stored files hold (format 1): a new encoder must write the same.
        let chunk = EventChunk([
            HistoryEntry(kind: .message, seq: 5, time: 300, sender: "al", text: "hé"),
            HistoryEntry(kind: .action, seq: 7, time: 1, sender: "b", text: ""),
        ])
        let expected: [UInt8] = [
            0x01,
            0x00, 0x00, 0xAC, 0x02, 0x02, 0x61, 0x6C, 0x03, 0x68, 0xC3, 0xA9,
            0x01, 0x02, 0x01, 0x01, 0x62, 0x00,
        ]
        #expect(chunk.encoded() == expected)
        let wide = EventChunk([HistoryEntry(kind: .topic, seq: .max, time: .max, sender: "z", text: String(repeating: "é", count: 100))])
        let blob = wide.encoded()
        #expect(blob.count == 1 + 1 + 1 + 10 + 2 + 2 + 200, "a varint of 64 bits takes ten bytes, a length of 200 two")
        #expect(blob.withUnsafeBytes { EventChunk.decode($0, firstSeq: .max) } == wide)
    }

    @Test func malformedBlobsDecodeToNilNeverCrash() {
        let chunk = EventChunk([
            HistoryEntry(kind: .message, seq: 5, time: 9, sender: "alice", text: "one"),
            HistoryEntry(kind: .topic, seq: 7, time: 10, sender: "bob", text: "two"),
        ])
        let blob = chunk.encoded()
        // Every truncation but the whole and the one that ends after the first event fails.
        for length in 0..<blob.count {
            let decoded = Array(blob[0..<length]).withUnsafeBytes { EventChunk.decode($0, firstSeq: 5) }
            if let decoded { #expect(decoded.events == [chunk.events[0]], "a prefix decodes only to whole events") }
        }
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            var bytes = blob
            bytes[Int.random(in: 0..<bytes.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator)
            if Bool.random(using: &generator) { bytes += (0..<Int.random(in: 1...12)).map { _ in UInt8.random(in: 0...255) } }
            let decoded = bytes.withUnsafeBytes { EventChunk.decode($0, firstSeq: 5) }
            if let decoded {
                #expect(zip(decoded.events, decoded.events.dropFirst()).allSatisfy { $0.seq < $1.seq }, "seqs always increase")
                #expect(decoded.firstSeq == 5)
            }
        }
        #expect([UInt8]().withUnsafeBytes { EventChunk.decode($0, firstSeq: 1) } == nil)
        #expect([2, 1, 0, 0, 0, 0].withUnsafeBytes { EventChunk.decode($0, firstSeq: 1) } == nil, "an unknown format")
        let overflow: [UInt8] = [1, 1, 0, 0, 0, 0, 1, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01, 0, 0, 0]
        #expect(overflow.withUnsafeBytes { EventChunk.decode($0, firstSeq: 1) } == nil, "a seq past 64 bits")
    }

    @Test func pagesAcrossChunkBoundariesMatchEveryEventInOrder() throws {
        let directory = try TemporaryDirectory(prefix: "chat-chunks")
        defer { directory.remove() }
        let database = try RoomDatabase(path: directory.path + "/rooms.sqlite3", durability: .off, create: true)
        var all: [HistoryEntry] = []
        var seq: UInt64 = 0
        // Commits of 1, 127, 128, 129 and 300 events: chunks end at and around every bound.
        for size in [1, 127, 128, 129, 300, 2] {
            var entries: [HistoryEntry] = []
            for _ in 0..<size {
                seq += UInt64.random(in: 1...3)
                entries.append(message(seq, "m\(seq)", time: seq))
            }
            all += entries
            // The other room's events interleave as whole runs in the same batch.
            let own = batch("r", entries)
            let mixed = LogBatch(
                rooms: own.rooms + [RoomRecord(name: "other", epoch: 3, lastSeq: seq, topic: nil, lastActive: 0)],
                events: own.events + [StoredEvent(room: "other", entry: message(seq, "o", time: seq))])
            try database.commit(mixed)
        }
        for limit in [1, 7, 128, 129, 1_000] {
            var forward: [HistoryEntry] = []
            var from: UInt64 = 0
            while true {
                let page = try database.page(of: "r", .after, from: from, limit: limit, budget: .max, cost: { _ in 1 })
                forward += page.entries
                if page.complete { break }
                from = try #require(page.entries.last?.seq)
            }
            #expect(forward == all, "forward by \(limit)")
            var backward: [HistoryEntry] = []
            from = 0
            while true {
                let page = try database.page(of: "r", .before, from: from, limit: limit, budget: .max, cost: { _ in 1 })
                backward = page.entries + backward
                if page.complete { break }
                from = try #require(page.entries.first?.seq)
            }
            #expect(backward == all, "backward by \(limit)")
        }
        // From a seq between two stored events, inside a chunk.
        let middle = all[200]
        let after = try database.page(of: "r", .after, from: middle.seq - 1, limit: 3, budget: .max, cost: { _ in 1 })
        #expect(after.entries == Array(all[200..<203]))
        let before = try database.page(of: "r", .before, from: middle.seq + 1, limit: 3, budget: .max, cost: { _ in 1 })
        #expect(before.entries == Array(all[198...200]))
        #expect(try database.loadRoom(named: "r", recent: 5)?.recent == Array(all.suffix(5)))
        #expect(try database.loadRoom(named: "other", recent: 100)?.recent.count == 6)
    }

    @Test func retentionCutsAChunkWhereItMust() throws {
        let directory = try TemporaryDirectory(prefix: "chat-chunks")
        defer { directory.remove() }
        let database = try RoomDatabase(path: directory.path + "/rooms.sqlite3", durability: .off, create: true)
        // One chunk whose events are not in time order: age retention takes exactly the old ones.
        let times: [UInt64] = [100, 900, 200, 950, 300]
        try database.commit(batch("r", times.enumerated().map { message(UInt64($0.offset + 1), "m", time: $0.element) }))
        let byAge = RetentionPolicy(maxEventsPerRoom: 0, maxBytesPerRoom: 0, maxAgeMillis: 500, maxTotalBytes: 0)
        #expect(try database.applyRetention(byAge, now: 1_000, maxDeletions: 2) == 2, "the limit holds inside a chunk")
        #expect(try database.applyRetention(byAge, now: 1_000, maxDeletions: 100) == 1)
        let room = try #require(try database.loadRoom(named: "r", recent: 10))
        #expect(room.recent.map(\.seq) == [2, 4])
        #expect(room.firstSeq == 2)
        let counts = try database.database.integer("SELECT event_count FROM rooms WHERE name = 'r'")
        #expect(counts == 2, "the room's count follows the cut")
        // A new event after the cut chunk still goes after it.
        try database.commit(batch("r", [message(6, "new", time: 990)]))
        #expect(try database.loadRoom(named: "r", recent: 10)?.recent.map(\.seq) == [2, 4, 6])
    }

    @Test func aCorruptChunkIsAnErrorNotACrash() throws {
        let directory = try TemporaryDirectory(prefix: "chat-chunks")
        defer { directory.remove() }
        let database = try RoomDatabase(path: directory.path + "/rooms.sqlite3", durability: .off, create: true)
        try database.commit(batch("r", [message(1, "one"), message(2, "two")]))
        try database.database.execute("UPDATE event_chunks SET events = x'01FF' WHERE room = 'r'")
        let error = #expect(throws: SQLiteError.self) {
            _ = try database.page(of: "r", .after, from: 0, limit: 10, budget: .max, cost: { _ in 1 })
        }
        #expect(error?.primaryCode == SQLITE_CORRUPT)
        #expect(error?.description.contains("malformed") == true, "\(error?.description ?? "")")
        #expect(throws: SQLiteError.self) { _ = try database.loadRoom(named: "r", recent: 10) }
    }

    @Test func aVersion1FileIsConvertedWithEveryEvent() throws {
        let directory = try TemporaryDirectory(prefix: "chat-chunks")
        defer { directory.remove() }
        let path = directory.path + "/rooms.sqlite3"
        do {
            // The schema chat-server wrote before chunks, row by row.
            let old = try SQLiteDatabase(path: path, mode: .readWriteCreate)
            try old.execute(
                """
                PRAGMA auto_vacuum=INCREMENTAL;
                CREATE TABLE rooms(name TEXT PRIMARY KEY NOT NULL, epoch INTEGER NOT NULL, last_seq INTEGER NOT NULL,
                    topic_text TEXT, topic_set_by TEXT, topic_time INTEGER, topic_seq INTEGER, last_active INTEGER NOT NULL,
                    event_count INTEGER NOT NULL, event_bytes INTEGER NOT NULL) WITHOUT ROWID;
                CREATE TABLE events(room TEXT NOT NULL, seq INTEGER NOT NULL, kind INTEGER NOT NULL, time INTEGER NOT NULL,
                    sender TEXT NOT NULL, text TEXT NOT NULL, PRIMARY KEY(room, seq)) WITHOUT ROWID;
                CREATE INDEX events_by_time ON events(time);
                PRAGMA user_version = 1;
                """)
            let insert = try old.prepare("INSERT INTO events VALUES(?1, ?2, ?3, ?4, ?5, ?6)")
            for seq in 1...300 {
                try insert.bind(.text("big"), .integer(Int64(seq)), .integer(Int64(seq % 2)), .integer(Int64(seq)), .text("s"), .text("t\(seq)"))
                try insert.run()
            }
            try insert.bind(.text("small"), .integer(4), .integer(0), .integer(7), .text("bob"), .text("hi"))
            try insert.run()
            try old.execute(
                """
                INSERT INTO rooms VALUES('big', 9, 305, 'topic', 'ann', 3, 2, 300, 300, 12345);
                INSERT INTO rooms VALUES('small', 8, 4, NULL, NULL, NULL, NULL, 7, 1, 40);
                """)
        }
        let database = try RoomDatabase(path: path, durability: .normal, create: true)
        #expect(try database.database.integer("PRAGMA user_version") == RoomDatabase.schemaVersion)
        #expect(try database.database.integer("SELECT count(*) FROM sqlite_master WHERE name = 'events'") == 0)
        let big = try #require(try database.loadRoom(named: "big", recent: 1_000))
        #expect(big.recent.map(\.seq) == Array(1...300))
        #expect(big.recent[0] == HistoryEntry(kind: .action, seq: 1, time: 1, sender: "s", text: "t1"))
        #expect(big.record.lastSeq == 305)
        #expect(big.record.topic == RoomTopic(text: "topic", setBy: "ann", time: 3, seq: 2))
        #expect(try database.loadRoom(named: "small", recent: 10)?.recent == [message(4, "hi", time: 7, sender: "bob")])
        try database.commit(batch("big", [message(306, "after")], lastSeq: 306))
        #expect(try database.loadRoom(named: "big", recent: 1)?.recent.map(\.seq) == [306])
        // The reader connection opens the converted file; a version 1 file it would refuse.
        _ = try RoomDatabase(path: path, durability: .normal, create: false)
    }
}
