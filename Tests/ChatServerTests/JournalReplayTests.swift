import ChatCore
import ChatProtocol
import ChatServer
import ChatStorage
import Dispatch
import Foundation
import Glibc
import RoomLog
import SocketCore
import TestSupport
import Testing

/// What is done to the journal a stopped server left, by a power loss or by hand: to its newest
/// file (the one holding the last records), or to every file.
enum JournalDamage: String, CaseIterable, CustomStringConvertible, Sendable {
    case cutInsideARecord, eightBytesFlipped, emptied, deleted, everyFileDeleted
    var description: String { rawValue }

    /// Does it to the journal in `directory`, whose newest file must hold records.
    func apply(to directory: String) throws {
        let files = RoomJournal.files(in: directory)
        // The newest file that holds records (the current one may hold none yet).
        let holding = files.last { fileSize(RoomJournal.path(of: $0, in: directory)) > RoomJournal.fileHeaderBytes }
        let newest = RoomJournal.path(of: try #require(holding, "a journal file with records to damage"), in: directory)
        #expect(fileSize(newest) > 1_000, "records wait in \(newest)")
        switch self {
        case .cutInsideARecord: #expect(truncate(newest, off_t(fileSize(newest) - 333)) == 0)
        case .eightBytesFlipped:
            let descriptor = open(newest, O_RDWR)
            defer { close(descriptor) }
            var bytes = [UInt8](repeating: 0, count: 8)
            let offset = off_t(fileSize(newest) / 2)
            #expect(pread(descriptor, &bytes, 8, offset) == 8)
            bytes = bytes.map { $0 ^ 0xA5 }
            #expect(pwrite(descriptor, bytes, 8, offset) == 8)
        case .emptied: #expect(truncate(newest, 0) == 0)
        case .deleted: #expect(unlink(newest) == 0)
        case .everyFileDeleted: for file in files { #expect(unlink(RoomJournal.path(of: file, in: directory)) == 0) }
        }
    }
}

/// The durable default's journal in front of SQLite (`SQLiteRoomStore` with `.eventLoop`), on
/// real files: what a stop at its worst moments leaves, and what reads see before the database
/// has taken a burst in. The process-level SIGKILL with events only in the journal is
/// `DurabilityTests.aKilledServerKeepsEveryAcknowledgedMessageAndClientsCatchUpExactly`.
@Suite("The journal in front of the database", .serialized)
struct JournalReplayTests {
    /// Commits `batches` batches of `events` messages in each of `rooms` rooms, as the server's
    /// loop does; returns how many failed.
    private func commit(_ store: SQLiteRoomStore, batches: Int, rooms: Int, events: Int, next: inout [UInt64], epoch: UInt64 = 1) -> Int {
        let loop = DispatchQueue(label: "test.loop")
        let failures = Locked(0)
        loop.sync {
            for _ in 0..<batches {
                stageBatch(into: store, rooms: rooms, events: events, next: &next, epoch: epoch)
                commitAsTheServerDoes(store, on: loop) { if case .failure = $0 { failures.withLock { $0 += 1 } } }
            }
        }
        return failures.withLock { $0 }
    }

    /// Holds SQLite's write lock from a connection of its own, as another process could: the
    /// store's hand-offs fail meanwhile and its records stay in the journal.
    private func holdWriteLock(of store: SQLiteRoomStore) throws -> SQLiteDatabase {
        let blocker = try SQLiteDatabase(path: store.directory.databasePath, mode: .readWrite)
        try blocker.execute("BEGIN IMMEDIATE")
        return blocker
    }

    /// Opens a store in `path`, commits as `commit` does while SQLite's lock is held, and closes
    /// it: every record is left in the journal only, for the next start to replay.
    private func stopWithEverythingInTheJournal(_ path: String, batches: Int, rooms: Int, events: Int, next: inout [UInt64]) throws {
        let store = try SQLiteRoomStore(directory: path, durability: .normal, retention: .keepAll)
        let blocker = try holdWriteLock(of: store)
        #expect(commit(store, batches: batches, rooms: rooms, events: events, next: &next) == 0)
        store.close()
        try blocker.execute("ROLLBACK")
    }

    /// What a commit's failure said; nil for a commit that succeeded.
    private static func failure(of result: Result<Void, CommitFailure>) -> String? {
        if case .failure(let failure) = result { return failure.error.message }
        return nil
    }

    /// Every seq of `room` in the database at `path`, in order, read apart from any store.
    private func storedSeqs(of room: String, in path: String) throws -> [UInt64] {
        let database = try RoomDatabase(path: path + "/" + RoomDatabase.fileName, durability: .off, create: false)
        return try database.loadRoom(named: room, recent: 100_000)?.recent.map(\.seq) ?? []
    }

    /// A server killed after the database took a batch in but before the journal's files were
    /// deleted leaves records the database already holds: the next start replays them and
    /// stores nothing twice.
    @Test func recordsTheDatabaseTookInBeforeAStopAreNotStoredTwice() throws {
        let data = try TemporaryDirectory(prefix: "chat-journal-replay")
        defer { data.remove() }
        let saved = try TemporaryDirectory(prefix: "chat-journal-saved")
        defer { saved.remove() }
        var next = [UInt64](repeating: 0, count: 3)
        do {
            let store = try SQLiteRoomStore(directory: data.path, durability: .normal, retention: .keepAll)
            defer { store.close() }
            let blocker = try holdWriteLock(of: store)
            #expect(commit(store, batches: 20, rooms: 3, events: 5, next: &next) == 0, "commits go to the journal while the lock is held")
            let files = RoomJournal.files(in: data.path)
            #expect(!files.isEmpty, "the records wait in the journal")
            for file in files {
                let name = (RoomJournal.path(of: file, in: data.path) as NSString).lastPathComponent
                try FileManager.default.copyItem(atPath: data.path + "/" + name, toPath: saved.path + "/" + name)
            }
            try blocker.execute("ROLLBACK")
            // A read hands the journal to the database first: then it holds every event.
            #expect(try store.loadRoom(named: "room0", recent: 1_000)?.recent.count == 100)
            #expect(RoomJournal.files(in: data.path).allSatisfy { !files.contains($0) }, "the files taken in are deleted")
            // Put back, as a kill between the database's commit and the deletion leaves them.
            for name in try FileManager.default.contentsOfDirectory(atPath: saved.path) {
                try FileManager.default.copyItem(atPath: saved.path + "/" + name, toPath: data.path + "/" + name)
            }
        }
        let reopened = try SQLiteRoomStore(directory: data.path, durability: .normal, retention: .keepAll)
        reopened.close()
        #expect(RoomJournal.files(in: data.path).count == 1, "the replayed files are deleted; the new run's first file is there")
        for room in 0..<3 {
            #expect(try storedSeqs(of: "room\(room)", in: data.path) == Array(1...100), "room\(room) holds each event once")
        }
    }

    /// A power loss in the middle of an append leaves the journal's last record cut short: the
    /// replay keeps every record before it, says what it dropped, and the store goes on.
    @Test func aRecordCutShortEndsTheReplayAndWhatCameBeforeIsKept() throws {
        let data = try TemporaryDirectory(prefix: "chat-journal-torn")
        defer { data.remove() }
        var next = [UInt64](repeating: 0, count: 1)
        try stopWithEverythingInTheJournal(data.path, batches: 3, rooms: 1, events: 10, next: &next)
        let files = RoomJournal.files(in: data.path)
        let last = RoomJournal.path(of: try #require(files.last, "the journal was left for the next start"), in: data.path)
        #expect(truncate(last, off_t(fileSize(last) - 7)) == 0)

        let recorder = CheckpointRecorder()
        let reopened = try SQLiteRoomStore(directory: data.path, durability: .normal, retention: .keepAll, logger: recorder.logger)
        #expect(recorder.lines.contains("the journal's last record was cut short; the records before it are kept"), "\(recorder.lines)")
        #expect(try reopened.loadRoom(named: "room0", recent: 1_000)?.recent.map(\.seq) == Array(1...20), "the first two commits, not the torn third")
        #expect(try reopened.loadRoom(named: "room0", recent: 0)?.record.epoch != 1, "the room moved to a new epoch: seqs 21 on will name other events")
        #expect(RoomJournal.files(in: data.path).count == 1, "the replayed files are deleted; the new run's first file is there")
        // The store goes on: the room's next events follow what it kept.
        next[0] = 20
        let epoch = try #require(try reopened.loadRoom(named: "room0", recent: 0)?.record.epoch)
        #expect(commit(reopened, batches: 1, rooms: 1, events: 5, next: &next, epoch: epoch) == 0)
        #expect(try reopened.loadRoom(named: "room0", recent: 1_000)?.recent.map(\.seq) == Array(1...25))
        reopened.close()
    }

    /// A replay big enough to start a checkpoint run once started one on the writer queue while
    /// the replay still used the writer's connection on the opening thread: reads right after
    /// the start then failed with "file is not a database". Checkpoints every 16 pages, each
    /// pausing after its first pass, make that window wide.
    @Test func aLargeReplayLeavesTheStoreReadableAtOnce() throws {
        let data = try TemporaryDirectory(prefix: "chat-journal-large")
        defer { data.remove() }
        var next = [UInt64](repeating: 0, count: 4)
        try stopWithEverythingInTheJournal(data.path, batches: 100, rooms: 4, events: 20, next: &next)
        var policy = LogCheckpointer.Policy(thresholdFrames: 16)
        policy.pauseAfterFirstPass = .milliseconds(300)
        let reopened = try SQLiteRoomStore(
            directory: data.path, durability: .normal, retention: .keepAll, commitPlacement: .eventLoop, checkpointPolicy: policy)
        defer { reopened.close() }
        for room in 0..<4 {
            #expect(try reopened.loadRoom(named: "room\(room)", recent: 5_000)?.recent.map(\.seq) == Array(1...2_000))
        }
    }

    /// A hand-off that meets SQLite's lock held elsewhere keeps its records and tries again,
    /// with nothing appended since: once the lock is free they reach the database by themselves,
    /// with no read or new commit to push them. (Retried, the hand-off once found no file to end
    /// and dropped its records from memory: the database never got them while the server ran.)
    @Test func aRefusedHandOffIsRetriedUntilTheDatabaseHasTheRecords() async throws {
        let data = try TemporaryDirectory(prefix: "chat-journal-retry")
        defer { data.remove() }
        let store = try SQLiteRoomStore(directory: data.path, durability: .normal, retention: .keepAll)
        defer { store.close() }
        let blocker = try holdWriteLock(of: store)
        var next = [UInt64](repeating: 0, count: 2)
        #expect(commit(store, batches: 3, rooms: 2, events: 10, next: &next) == 0)
        // Two or three hand-offs of 100 ms meet the lock and give up after 50 ms each.
        usleep(350_000)
        try blocker.execute("ROLLBACK")
        let stored = await eventually(timeout: .seconds(10)) { (try? storedSeqs(of: "room1", in: data.path)) == Array(1...30) }
        #expect(stored, "the retried hand-off stored the records: \((try? storedSeqs(of: "room1", in: data.path)) ?? [])")
    }

    /// SQLite held up (its write lock held elsewhere) while commits keep coming: past
    /// `journalHoldBytes` the journal takes no more at once. A commit then waits on the writer
    /// queue, the next follows it there, the first fails with a clear error once SQLite's lock
    /// has been waited for, and the second, with SQLite back, is stored: completions in order,
    /// the failed commit's events not stored, every other one's stored.
    @Test func commitsPastTheHoldWaitForTheDatabaseAndFailClearlyWhenItStaysAway() throws {
        let data = try TemporaryDirectory(prefix: "chat-journal-hold")
        defer { data.remove() }
        let store = try SQLiteRoomStore(directory: data.path, durability: .normal, retention: .keepAll)
        defer { store.close() }
        var blocker: SQLiteDatabase? = try holdWriteLock(of: store)
        let loop = DispatchQueue(label: "test.loop")
        // (commit number, the failure's message or nil), in the order completions came.
        let completed = Locked<[(Int, String?)]>([])
        var next = [UInt64](repeating: 0, count: 1)
        let atOnce = loop.sync { () -> Int in
            var number = 0
            // 1,000 messages of 100 bytes a commit: about 110 KB of record each.
            while true {
                stageBatch(into: store, rooms: 1, events: 1_000, next: &next)
                let before = completed.withLock { $0.count }
                store.commitStaged(on: loop) { [number] result in completed.withLock { $0.append((number, Self.failure(of: result))) } }
                number += 1
                if completed.withLock({ $0.count }) == before { break }
            }
            // One more, behind the one that waits.
            stageBatch(into: store, rooms: 1, events: 1_000, next: &next)
            store.commitStaged(on: loop) { [number] result in completed.withLock { $0.append((number, Self.failure(of: result))) } }
            return number - 1
        }
        let held = atOnce * 110_000
        #expect(held >= SQLiteRoomStore.journalHoldBytes * 9 / 10, "commits completed at once until the hold: \(atOnce)")
        #expect(completed.withLock { $0 }.allSatisfy { $0.1 == nil }, "each of them journaled")

        // The first that waited fails once SQLite's lock has been waited for; then SQLite is back.
        let deadline = ContinuousClock.now + .seconds(30)
        while completed.withLock({ $0.count }) == atOnce, ContinuousClock.now < deadline { usleep(10_000) }
        try blocker?.execute("ROLLBACK")
        blocker = nil
        while completed.withLock({ $0.count }) < atOnce + 2, ContinuousClock.now < deadline { usleep(10_000) }
        let results = completed.withLock { $0 }
        #expect(results.map(\.0) == Array(0..<(atOnce + 2)), "completions in commit order")
        let waited = try #require(results.count == atOnce + 2 ? results[atOnce] : nil)
        #expect(waited.1?.contains("behind the journal") == true, "the first commit that waited failed clearly: \(String(describing: waited.1))")
        #expect(results.last?.1 == nil, "the next one was stored once SQLite was back")

        let stored = try store.loadRoom(named: "room0", recent: 1_000_000)?.recent.map(\.seq) ?? []
        let failed = UInt64(atOnce * 1_000 + 1)...UInt64(atOnce * 1_000 + 1_000)
        #expect(stored == Array(1..<failed.lowerBound) + Array((failed.upperBound + 1)...(failed.upperBound + 1_000)))
    }

    /// A burst still in the journal when a room is loaded and a history page is read, both at
    /// once: each read waits for the database to take the burst in and sees all of it.
    @Test func readsRightAfterABurstSeeAllOfIt() throws {
        let data = try TemporaryDirectory(prefix: "chat-journal-read")
        defer { data.remove() }
        let store = try SQLiteRoomStore(directory: data.path, durability: .normal, retention: .keepAll)
        defer { store.close() }
        var next = [UInt64](repeating: 0, count: 2)
        #expect(commit(store, batches: 200, rooms: 2, events: 10, next: &next) == 0)
        let answers = Locked<[RoomReadAnswer]>([])
        let done = DispatchSemaphore(value: 0)
        let queue = DispatchQueue(label: "test.reads")
        store.read(.room("room1", recent: 50), on: queue) { result in
            if case .success(let answer) = result { answers.withLock { $0.append(answer) } }
            done.signal()
        }
        store.read(.page("room0", .after, from: 0, limit: 5_000, budget: .max, cost: { _ in 1 }), on: queue) { result in
            if case .success(let answer) = result { answers.withLock { $0.append(answer) } }
            done.signal()
        }
        #expect(done.wait(timeout: .now() + 30) == .success && done.wait(timeout: .now() + 30) == .success, "both reads answered")
        let read = answers.withLock { $0 }
        #expect(read.count == 2, "both reads succeeded: \(read.count)")
        for answer in read {
            switch answer {
            case .room(let room):
                #expect(room?.record.lastSeq == 2_000 && room?.recent.last?.seq == 2_000 && room?.recent.count == 50, "the room as of the burst's end")
            case .page(let entries, let complete):
                #expect(entries.map(\.seq) == Array(1...2_000) && complete, "the page holds the whole burst: \(entries.count)")
            }
        }
    }

    /// A server stops with 30 events of a room only in its journal (SQLite's lock was held), and
    /// the journal is damaged before the next start: whatever the damage, the room moves to a
    /// new epoch and the store says why — it cannot prove it replayed all it acknowledged, and
    /// the `seq`s it numbers next would otherwise name, under one epoch, events clients never saw
    /// with those numbers. What was intact is kept.
    @Test(arguments: JournalDamage.allCases)
    func aDamagedJournalMovesEveryRoomToANewEpochAndSaysWhy(_ damage: JournalDamage) throws {
        let data = try TemporaryDirectory(prefix: "chat-journal-damage")
        defer { data.remove() }
        var next = [UInt64](repeating: 0, count: 2)
        do {
            let store = try SQLiteRoomStore(directory: data.path, durability: .normal, retention: .keepAll)
            #expect(commit(store, batches: 2, rooms: 2, events: 10, next: &next) == 0)
            #expect(try store.loadRoom(named: "room0", recent: 0)?.record.epoch == 1, "20 events stored in SQLite")
            let blocker = try holdWriteLock(of: store)
            #expect(commit(store, batches: 3, rooms: 2, events: 10, next: &next) == 0)
            store.close()
            try blocker.execute("ROLLBACK")
        }
        let before = RoomJournal.files(in: data.path).map { "\($0): \(fileSize(RoomJournal.path(of: $0, in: data.path))) B" }
        let database = try RoomDatabase(path: data.path + "/" + RoomDatabase.fileName, durability: .off, create: false)
        let state = try database.journalState()
        let storedBefore = try database.loadRoom(named: "room0", recent: 0)?.record.lastSeq
        #expect(storedBefore == 20, "the last 30 events of each room are in the journal only: \(before), \(String(describing: state))")
        try damage.apply(to: data.path)

        let recorder = CheckpointRecorder()
        let reopened = try SQLiteRoomStore(directory: data.path, durability: .normal, retention: .keepAll, logger: recorder.logger)
        defer { reopened.close() }
        #expect(
            recorder.lines.contains { $0.hasPrefix("the journal may not hold everything the last run acknowledged") },
            "the loss is logged: \(recorder.lines); the journal before the damage: \(before), \(String(describing: state))")
        for room in ["room0", "room1"] {
            let stored = try #require(try reopened.loadRoom(named: room, recent: 1_000))
            #expect(stored.record.epoch != 1, "\(room) moved to a new epoch")
            let seqs = stored.recent.map(\.seq)
            #expect(seqs.count >= 20 && seqs == Array(1...UInt64(seqs.count)), "what was intact is kept, in order: \(seqs.count) events")
        }
    }

    /// The same stop with nothing damaged keeps every room's epoch and every event; so does a
    /// clean stop followed by a restart of the machine (the journal was synced), while a stop
    /// that left it unsynced followed by one does not: the last 100 ms may be gone.
    @Test func anIntactJournalKeepsTheEpochsUnlessTheMachineRestartedAfterAnUncleanStop() throws {
        for (clean, sameBoot, kept) in [(false, true, true), (true, false, true), (false, false, false)] {
            let data = try TemporaryDirectory(prefix: "chat-journal-intact")
            defer { data.remove() }
            var next = [UInt64](repeating: 0, count: 1)
            do {
                let store = try SQLiteRoomStore(directory: data.path, durability: .normal, retention: .keepAll, bootID: "boot-1")
                // Held through the stop, the lock keeps the stop from being recorded clean.
                let blocker = try holdWriteLock(of: store)
                #expect(commit(store, batches: 3, rooms: 1, events: 10, next: &next) == 0)
                if clean { try blocker.execute("ROLLBACK") }
                store.close()
                if !clean { try blocker.execute("ROLLBACK") }
            }
            let recorder = CheckpointRecorder()
            let reopened = try SQLiteRoomStore(
                directory: data.path, durability: .normal, retention: .keepAll, bootID: sameBoot ? "boot-1" : "boot-2",
                logger: recorder.logger)
            let stored = try #require(try reopened.loadRoom(named: "room0", recent: 1_000))
            reopened.close()
            let case_ = "clean stop \(clean), same boot \(sameBoot)"
            #expect(stored.recent.map(\.seq) == Array(1...30), "every event replayed (\(case_))")
            #expect((stored.record.epoch == 1) == kept, "epoch kept: \(kept) (\(case_))")
            #expect(recorder.lines.contains { $0.hasPrefix("the journal may not hold") } == !kept, "\(case_): \(recorder.lines)")
        }
    }

    /// A room load while another process holds SQLite's lock, with the room's newest events only
    /// in the journal: the hand-off before the read cannot store them, and the read fails rather
    /// than answer the room as of an older `seq` (the chat would number events again that
    /// clients saw). Once the lock is free, the read sees everything.
    @Test func aReadOfARoomWhoseNewestEventsTheDatabaseCouldNotTakeInFailsRatherThanMissThem() throws {
        let data = try TemporaryDirectory(prefix: "chat-journal-locked-read")
        defer { data.remove() }
        let store = try SQLiteRoomStore(directory: data.path, durability: .normal, retention: .keepAll)
        defer { store.close() }
        var next = [UInt64](repeating: 0, count: 1)
        #expect(commit(store, batches: 1, rooms: 1, events: 10, next: &next) == 0)
        #expect(try store.loadRoom(named: "room0", recent: 0)?.record.lastSeq == 10)
        let blocker = try holdWriteLock(of: store)
        #expect(commit(store, batches: 1, rooms: 1, events: 10, next: &next) == 0)
        let answer = Locked<Result<RoomReadAnswer, StorageError>?>(nil)
        let done = DispatchSemaphore(value: 0)
        store.read(.room("room0", recent: 5), on: DispatchQueue(label: "test.read")) { result in
            answer.withLock { $0 = result }
            done.signal()
        }
        #expect(done.wait(timeout: .now() + 30) == .success)
        switch answer.withLock({ $0 }) {
        case .failure(let error)?: #expect(error.message.contains("not in the database yet"), "\(error.message)")
        case .success(.room(let room))?: Issue.record("read as of seq \(room?.record.lastSeq ?? 0) while seq 20 is acknowledged")
        default: Issue.record("no answer")
        }
        #expect(throws: StorageError.self) { try store.loadRoom(named: "room0", recent: 0) }
        try blocker.execute("ROLLBACK")
        #expect(try store.loadRoom(named: "room0", recent: 0)?.record.lastSeq == 20)
    }
}
