import ChatCore
import ChatProtocol
import ChatStorage
import Glibc
import TestSupport
import Testing

@Suite("The journal of commits in front of the database")
struct RoomJournalTests {
    /// A record of `rooms` rooms, each with a chunk of `events` events.
    private func record(rooms: Int, events: Int, from seq: UInt64 = 1) -> RoomJournal.Record {
        var records: [RoomRecord] = []
        var chunks: [EncodedChunk] = []
        for index in 0..<rooms {
            let name = "room\(index)"
            let topic = index.isMultiple(of: 2) ? RoomTopic(text: "tópic \(index)", setBy: "ann", time: 7, seq: 1) : nil
            let entries = (0..<UInt64(events)).map { HistoryEntry(kind: .message, seq: seq + $0, time: 1_000 + $0, sender: "bob", text: "line \($0)") }
            records.append(RoomRecord(name: name, epoch: 3, lastSeq: seq + UInt64(events) - 1, topic: topic, lastActive: 99))
            let chunk = EventChunk(entries)
            chunks.append(
                EncodedChunk(
                    room: name, firstSeq: chunk.firstSeq, lastSeq: chunk.lastSeq, oldestTime: chunk.oldestTime, count: events,
                    bytes: entries.reduce(0) { $0 + StoredEvent.storedBytes(room: name, entry: $1) }, blob: chunk.encoded()))
        }
        return RoomJournal.Record(rooms: records, chunks: chunks)
    }

    @Test func recordsReadBackAsAppendedAcrossFilesAndRotations() throws {
        let directory = try TemporaryDirectory(prefix: "chat-journal")
        defer { directory.remove() }
        let journal = RoomJournal(directory: directory.path)
        let first = [record(rooms: 2, events: 3), record(rooms: 1, events: 128, from: 4)]
        for record in first { try journal.append(record) }
        #expect(journal.rotate() == 1)
        #expect(journal.rotate() == nil, "a file nothing was appended to is not ended twice")
        let second = record(rooms: 3, events: 1, from: 200)
        try journal.append(second)
        #expect(journal.sync())
        #expect(RoomJournal.files(in: directory.path) == [1, 2])
        let one = try RoomJournal.read(RoomJournal.path(of: 1, in: directory.path))
        #expect(one.intact)
        #expect(one.records == first)
        let two = try RoomJournal.read(RoomJournal.path(of: 2, in: directory.path))
        #expect(two.records == [second] && two.intact)

        // A journal opened on the same directory goes on after the files there.
        let reopened = RoomJournal(directory: directory.path)
        #expect(reopened.number == 3)
        RoomJournal.remove(through: 1, in: directory.path)
        #expect(RoomJournal.files(in: directory.path) == [2])
    }

    /// What a power loss in the middle of a write leaves: the records before the torn one are
    /// read, and the file says it was not intact; so does a record whose bytes changed.
    @Test func aTornOrAlteredRecordEndsWhatIsRead() throws {
        let records = (0..<3).map { record(rooms: 1, events: 40, from: 1 + 40 * UInt64($0)) }
        func journalFile() throws -> (TemporaryDirectory, String, Int) {
            let directory = try TemporaryDirectory(prefix: "chat-journal")
            let journal = RoomJournal(directory: directory.path)
            for record in records { try journal.append(record) }
            _ = journal.rotate()
            let path = RoomJournal.path(of: 1, in: directory.path)
            var info = stat()
            stat(path, &info)
            return (directory, path, Int(info.st_size))
        }

        let (torn, path, size) = try journalFile()
        defer { torn.remove() }
        // The three records are the same size, after the file's header: each cut falls inside the last.
        let whole = size - RoomJournal.fileHeaderBytes
        #expect(whole % 3 == 0 && whole / 3 > 200)
        for cut in [size - 1, size - 20, size - 200] {
            #expect(truncate(path, off_t(cut)) == 0)
            let read = try RoomJournal.read(path)
            #expect(!read.intact, "cut to \(cut) of \(whole) bytes")
            #expect(read.records == Array(records.prefix(2)), "the records before the torn one are whole")
        }

        let (altered, alteredPath, alteredSize) = try journalFile()
        defer { altered.remove() }
        let descriptor = open(alteredPath, O_RDWR)
        defer { close(descriptor) }
        // A byte of the second record's payload, past its 16-byte header.
        let offset = off_t(RoomJournal.fileHeaderBytes + (alteredSize - RoomJournal.fileHeaderBytes) / 3 + 16 + 30)
        var byte: UInt8 = 0
        #expect(pread(descriptor, &byte, 1, offset) == 1)
        byte ^= 0x5A
        #expect(pwrite(descriptor, &byte, 1, offset) == 1)
        let read = try RoomJournal.read(alteredPath)
        #expect(!read.intact)
        #expect(read.records == [records[0]], "the record whose bytes changed, and all after it, are not read")
    }

    /// What `RoomDatabase.apply` promises the journal: its records store what committing the
    /// same batches stores, event for event, in fewer rows (a room's chunks joined), and records
    /// a restart replays twice add nothing.
    @Test func applyingRecordsStoresWhatCommittingStoresAndAReplayAddsNothing() throws {
        let directory = try TemporaryDirectory(prefix: "chat-journal")
        defer { directory.remove() }
        let committed = try RoomDatabase(path: directory.path + "/committed.sqlite3", durability: .off, create: true)
        let applied = try RoomDatabase(path: directory.path + "/applied.sqlite3", durability: .off, create: true)
        var batches: [LogBatch] = []
        var seq: [String: UInt64] = ["a": 0, "b": 0]
        for round in 0..<3 {
            var batch = (rooms: [RoomRecord](), events: [StoredEvent]())
            for room in ["a", "b"] {
                // 150 events in room a's second batch: two chunks.
                let count = room == "a" && round == 1 ? 150 : 5 + round
                for _ in 0..<count {
                    seq[room]! += 1
                    batch.events.append(
                        StoredEvent(
                            room: room,
                            entry: HistoryEntry(kind: .message, seq: seq[room]!, time: 100 + seq[room]!, sender: "ann", text: "line \(seq[room]!)")))
                }
                let topic = round == 2 ? RoomTopic(text: "new topic", setBy: "ann", time: 500, seq: seq[room]!) : nil
                batch.rooms.append(RoomRecord(name: room, epoch: 9, lastSeq: seq[room]!, topic: topic, lastActive: 100 + seq[room]!))
            }
            batches.append(LogBatch(rooms: batch.rooms, events: batch.events))
        }
        for batch in batches { try committed.commit(batch) }
        let records = batches.map { RoomJournal.Record(rooms: $0.rooms, chunks: RoomDatabase.encodedChunks(of: $0)) }
        #expect(records[1].chunks.filter { $0.room == "a" }.map(\.count) == [128, 22], "chunks split as a commit splits them")
        try applied.apply(Array(records[0..<2]))
        // A restart replays every file it finds, the first two records included.
        let replayed = try applied.apply(records)
        #expect(replayed.rooms == ["a", "b"])
        for room in ["a", "b"] {
            let fromCommits = try committed.loadRoom(named: room, recent: 1_000)
            let fromJournal = try applied.loadRoom(named: room, recent: 1_000)
            #expect(fromJournal != nil && fromJournal == fromCommits, "room \(room) is stored alike")
        }
        #expect(try applied.totalBytes() == committed.totalBytes(), "every event counted once")
        #expect(try committed.database.integer("SELECT count(*) FROM event_chunks") == 7, "a row per chunk a commit wrote")
        #expect(try applied.database.integer("SELECT count(*) FROM event_chunks") == 6, "b's first two chunks joined")

        // All three records at once: b's three chunks are one row, a's last two one row, and
        // a's full chunk of 128 stays a row of its own.
        let together = try RoomDatabase(path: directory.path + "/together.sqlite3", durability: .off, create: true)
        try together.apply(records)
        for room in ["a", "b"] {
            #expect(try together.loadRoom(named: room, recent: 1_000) == committed.loadRoom(named: room, recent: 1_000), "room \(room) is stored alike")
        }
        #expect(try together.database.integer("SELECT count(*) FROM event_chunks WHERE room = 'b'") == 1)
        #expect(
            try together.database.text("SELECT group_concat(event_count, ',') FROM (SELECT event_count FROM event_chunks WHERE room = 'a' ORDER BY first_seq)")
                == "5,128,29")
        #expect(try together.totalBytes() == committed.totalBytes())

        // A chunk that overlaps what is stored is refused, and nothing of its record is written.
        var overlapping = records[2]
        overlapping.chunks[0].firstSeq -= 1
        overlapping.chunks[0].lastSeq += 1
        #expect(throws: SQLiteError.self) { try applied.apply([overlapping]) }
        #expect(try applied.totalBytes() == committed.totalBytes())
    }

    @Test func aFileThatIsNotThereIsAClearError() throws {
        let directory = try TemporaryDirectory(prefix: "chat-journal")
        defer { directory.remove() }
        #expect(RoomJournal.files(in: directory.path).isEmpty)
        do {
            _ = try RoomJournal.read(RoomJournal.path(of: 9, in: directory.path))
            Issue.record("reading a missing file did not fail")
        } catch {
            #expect(error.message.contains("journal-00000000000000000009.log"), "\(error.message)")
        }
    }
}
