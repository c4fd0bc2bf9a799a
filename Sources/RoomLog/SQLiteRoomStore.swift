import ChatCore
import ChatProtocol
import ChatStorage
import Dispatch
import Glibc
import Logging
import SocketCore

/// Where `SQLiteRoomStore` commits a batch.
public enum CommitPlacement: String, Sendable, CaseIterable {
    /// On the caller's queue, inside `commitStaged`, as Redis appends to its log at the end of
    /// the event loop's turn: a commit is one write(2) of a record to the journal
    /// (`RoomJournal`; the fsync is the background sync's), so the loop pays no thread hop and
    /// deliveries are not held across one. The database takes the journal's records in on the
    /// writer queue, many commits in one transaction every 100 ms; checkpoints run there too
    /// (`LogCheckpointer`).
    case eventLoop
    /// On the writer queue, the completion handed back to the caller's queue: the loop keeps
    /// serving while the writer commits. The choice when a commit fsyncs (`Durability.always`).
    case writerThread

    /// `.writerThread` for `Durability.always`, whose fsync per commit would stall every client
    /// if the loop made it; `.eventLoop` otherwise.
    public static func recommended(for durability: Durability) -> CommitPlacement {
        durability == .always ? .writerThread : .eventLoop
    }
}

/// The `RoomStore` the server runs on: SQLite in a data directory.
///
/// Its commits are placed as `placement` says. With `.writerThread`, a writer connection, used
/// only on `writerQueue`, commits each batch in one transaction and runs retention in small
/// steps between commits, SQLite checkpointing inside its commits.
///
/// With `.eventLoop`, a commit appends its batch, encoded as the rows it becomes, to `journal`
/// on the server's queue, and completes there. Every `journalBatchInterval` (or sooner, at
/// `journalBatchBytes`) a hand-off on `writerQueue` starts the next journal file, writes the
/// records of the ones before it into the database in one transaction (`RoomDatabase.apply`,
/// a room's chunks joined into few rows), syncs the log, and deletes those files. SQLite's
/// own checkpoints are off: `checkpointer`'s runs, retention and hand-offs take turns on
/// `writerQueue`. A hand-off waits `handOffLockWait` at most for SQLite's lock (another
/// process may hold it); records it could not write stay in the journal and are tried again.
/// When the database falls `journalHoldBytes` behind, commits wait for a hand-off on the
/// writer queue (their completions come later, through `runFinishedCommits`), and so do the
/// commits after them until they complete: the journal's records in memory, and the log a
/// hand-off grows, stay bounded however fast clients write. A read of a room with events still
/// only in the journal waits for a hand-off first. At start, the journal files a stopped
/// server left are replayed into the database (`replayJournal`).
///
/// Either way a second connection, `reader`, used only on `readQueue`, reads a joiner's room and
/// history pages older than memory holds (indexed reads of at most a page of rows): WAL mode
/// lets it read while the others commit, and the server's queue never waits for the disk to
/// read.
///
/// Retention and the log's background sync are `upkeep`'s, an object of its own (see
/// `StoreUpkeep` for why).
///
/// `@unchecked Sendable`: `staged`, `runningFinished` and `handedOff` are used on
/// the server's queue only; `writer` on `writerQueue` only; `reader` on `readQueue` only;
/// `finished` and `journaled` are behind their locks.
public final class SQLiteRoomStore: RoomStore, @unchecked Sendable {
    /// The directory, locked for this store's lifetime.
    public let directory: DataDirectory
    /// Whether its writes (and those of the accounts' and moderation files beside it) reach the
    /// disk: `/metrics`, `/status` and `/healthz` read it.
    public let health: StorageHealth
    /// How much history is kept on disk.
    public let retention: RetentionPolicy
    /// Where commits run.
    public let placement: CommitPlacement
    /// What a commit survives.
    private let durability: Durability
    /// With `.eventLoop`, the write-ahead log's checkpoints; nil with `.writerThread` (SQLite's own).
    public let checkpointer: LogCheckpointer?
    private let logger: Logger
    private let writerQueue = DispatchQueue(label: "ChatServer.storage")
    private let writer: RoomDatabase
    private let readQueue = DispatchQueue(label: "ChatServer.storage.read")
    private let reader: RoomDatabase
    // The fields the server's queue uses skip run-time exclusivity checks: no access overlaps
    // another, and `stage` runs once per stored event (as in `ChatServer`).
    @exclusivity(unchecked) private var staged = LogBatch()
    /// Commits the writer has finished, oldest first, each with what to run for it on the
    /// server's queue: handed over through a lock, so the server can take them between requests
    /// (`runFinishedCommits`) rather than after everything already queued.
    private let finished = Locked<[@Sendable () -> Void]>([])
    /// Whether `runFinishedCommits` is running (on the server's queue).
    @exclusivity(unchecked) private var runningFinished = false
    /// With `.eventLoop`: commits waiting on the writer queue for a hand-off and not yet
    /// completed (on the server's queue). While there are any, later commits follow them there.
    @exclusivity(unchecked) private var handedOff = 0
    /// Retention and the log's background sync.
    private let upkeep: StoreUpkeep
    /// With `.eventLoop`: the journal each commit is appended to; nil otherwise.
    private let journal: RoomJournal?
    /// What the journal holds that the database has not taken in yet, behind a lock: appends
    /// come from the server's queue, hand-offs from the writer queue, and reads and `close()`
    /// from wherever they are called.
    private let journaled = Locked(JournaledRecords())
    /// How long records wait in the journal before the database takes them in, and how many
    /// bytes of records start a hand-off sooner.
    static let journalBatchInterval: DispatchTimeInterval = .milliseconds(100)
    static let journalBatchBytes = 2 << 20
    /// How many bytes of records the journal may hold that the database has not taken in
    /// before commits wait for a hand-off (on the writer queue, not the server's): a batch
    /// being written and one more. What bounds the records kept in memory and the log one
    /// hand-off writes, when the disk or SQLite's lock holds the writer up.
    public static let journalHoldBytes = 2 * journalBatchBytes
    /// How long a commit waiting for a hand-off lets it wait for SQLite's lock, as a commit on
    /// the writer thread would, before it fails.
    static let backPressureLockWait: Duration = .seconds(5)

    /// The journal's records not yet in the database.
    struct JournaledRecords {
        /// In the order appended, those no hand-off has taken yet, each with its size in the
        /// journal (a room's record counts, topic and all, as much as its events).
        var records: [(record: RoomJournal.Record, bytes: Int)] = []
        /// Bytes of `records`: past `journalBatchBytes` a hand-off starts at once.
        var newBytes = 0
        /// Bytes of records the database has not taken in, `records` and a hand-off's under
        /// way: past `journalHoldBytes` commits wait for a hand-off.
        var bytes = 0
        /// Per room, how many records with its changes the database has not taken in: a read of
        /// the room waits for a hand-off while there are any (other rooms' reads do not).
        var unstoredRooms: [String: Int] = [:]
        /// Whether a hand-off is due on the writer queue after `journalBatchInterval`.
        var handOffScheduled = false
        /// Whether a hand-off for a full batch is queued on the writer queue.
        var handOffQueued = false
        /// Set by `close()`: what is left stays in the journal for the next start to replay.
        var closed = false
    }

    /// How long a hand-off waits for SQLite's write lock before it leaves its records in the
    /// journal for the next try: reads of rooms with journaled events wait behind it.
    static let handOffLockWait: Duration = .milliseconds(50)

    /// How often, with `Durability.normal`, the write-ahead log is synced in the background: what
    /// a power loss can lose, and what keeps each checkpoint's own sync short.
    public static let logSyncInterval: Duration = .milliseconds(100)

    /// How often retention runs by default: how late the per-room, age and empty-room bounds
    /// may take effect. The total does not wait for it: a commit that passes it is trimmed at
    /// once (docs/SERVER.md, "Retention").
    public static let defaultRetentionInterval: Duration = .seconds(10)

    /// The checkpoint policy when the caller names none: `LogCheckpointer.Policy.standard`, or a
    /// run every `CHAT_SERVER_CHECKPOINT_PAGES` pages of log when that environment variable holds
    /// a positive number. The variable is a test and tuning knob, not a user setting: the
    /// process tests make checkpoints frequent with it, to kill a server inside one.
    public static func checkpointPolicyFromEnvironment() -> LogCheckpointer.Policy {
        guard let text = getenv("CHAT_SERVER_CHECKPOINT_PAGES").map({ String(cString: $0) }), let pages = Int(text), pages > 0
        else { return .standard }
        var policy = LogCheckpointer.Policy(thresholdFrames: pages)
        // The same kind of knob: each run waits this long after its first pass, so that a test
        // kills the server inside a run for certain.
        if let text = getenv("CHAT_SERVER_CHECKPOINT_PAUSE_MS").map({ String(cString: $0) }), let pause = Int(text), pause > 0 {
            policy.pauseAfterFirstPass = .milliseconds(pause)
        }
        return policy
    }

    /// Opens (creating them if missing) the directory and its database. Throws a `StorageError`
    /// whose message names the path and the reason: an unwritable directory, a directory another
    /// server holds, a file that is not a database or has a newer schema.
    ///
    /// `commitPlacement` says where commits run; `checkpointPolicy` (nil: from the environment,
    /// `checkpointPolicyFromEnvironment`) when the log is checkpointed with `.eventLoop`.
    ///
    /// `bootID`: the machine's boot (`currentBootID()`); a start that finds another recorded by a
    /// run that stopped without syncing its journal takes it that unsynced commits may be gone.
    public init(
        directory path: String, durability: Durability, retention: RetentionPolicy,
        retentionInterval: Duration = defaultRetentionInterval, commitPlacement: CommitPlacement = .eventLoop,
        checkpointPolicy: LogCheckpointer.Policy? = nil, bootID: String = currentBootID(),
        logger: Logger = Logger(label: "chat-server.storage")
    ) throws(StorageError) {
        directory = try DataDirectory(path: path)
        health = StorageHealth(logger: logger)
        self.retention = retention
        self.logger = logger
        placement = commitPlacement
        self.durability = durability
        writer = try RoomDatabase(path: directory.databasePath, durability: durability, create: true)
        if commitPlacement == .eventLoop {
            // Before the checkpointer watches the writer: a run it started now would use the
            // connection on the writer queue while the replay still uses it here.
            // Through the locked directory itself: a journal file is never made in, or read from,
            // a directory another server put at the same path (`DataDirectory.anchoredPath`).
            let journal = try Self.replayJournal(
                in: directory.anchoredPath, into: writer, durability: durability, bootID: bootID, logger: logger)
            self.journal = journal
            let checkpointer = LogCheckpointer(
                connection: writer.database, queue: writerQueue, policy: checkpointPolicy ?? Self.checkpointPolicyFromEnvironment()
            ) { [logger, health] event in Self.log(event, to: logger, health: health) }
            // Hand-offs and retention commit through the writer.
            checkpointer.watch(writer.database)
            self.checkpointer = checkpointer
        } else {
            checkpointer = nil
            journal = nil
        }
        reader = try RoomDatabase(path: directory.databasePath, durability: durability, create: false)
        upkeep = StoreUpkeep(
            retention: retention, writer: writer, writerQueue: writerQueue,
            databasePath: directory.databasePath, journal: journal, health: health, logger: logger)
        upkeep.start(retentionInterval: retentionInterval, logSyncInterval: Self.logSyncInterval, durability: durability)
    }

    /// Caps the database file at about `bytes` (`PRAGMA max_page_count`), and with
    /// `.eventLoop` each journal file too: past it, commits fail as on a full disk. For tests
    /// of that failure.
    public func capFileSize(bytes: Int) throws(StorageError) {
        journal?.sizeCap = bytes
        let result: Result<Void, SQLiteError> = writerQueue.sync {
            Result { () throws(SQLiteError) in try Self.cap(writer.database, bytes: bytes) }
        }
        if case .failure(let error) = result { throw StorageError("cannot cap the database: \(error)", sqlite: error) }
    }

    /// Caps `database`'s file at about `bytes` (`capFileSize`), on the connection's own queue.
    private static func cap(_ database: SQLiteDatabase, bytes: Int) throws(SQLiteError) {
        let pageSize = try database.integer("PRAGMA page_size") ?? 4096
        try database.execute("PRAGMA max_page_count = \(max(1, Int64(bytes) / pageSize))")
    }

    // MARK: RoomStore

    /// See `RoomStore.read(_:on:completion:)`: read on `readQueue`, answered on `queue`.
    public func read(
        _ request: RoomRead, on queue: DispatchQueue,
        completion: @escaping @Sendable (Result<RoomReadAnswer, StorageError>) -> Void
    ) {
        let read = { @Sendable [self] in
            readQueue.async { [self] in
                let answer = request.answer(room: readRoom, page: readPage)
                queue.async { completion(answer) }
            }
        }
        guard journal != nil, journaled.withLock({ $0.unstoredRooms[request.room] != nil }) else { return read() }
        // Events only in the journal: the database takes them first, and the read follows — or
        // fails, when the database could not take them (its lock held elsewhere): a room read
        // without them would go on from an older `seq` and number events again that clients saw.
        writerQueue.async { [self] in
            handOffJournaled()
            guard let unstored = unstoredFailure(of: request.room) else { return read() }
            queue.async { completion(.failure(unstored)) }
        }
    }

    /// Why `room` cannot be read yet: the database has not taken in all of its events (nil when
    /// it has). On the writer queue, after a hand-off.
    private func unstoredFailure(of room: String) -> StorageError? {
        guard journaled.withLock({ $0.unstoredRooms[room] != nil }) else { return nil }
        return StorageError("the newest events of #\(room) are not in the database yet (its write lock is held elsewhere); try again")
    }

    /// The stored room `name` with its `recent` newest events, or nil if none is stored, read
    /// now, the caller waiting: for tests and tools, not the server's queue.
    public func loadRoom(named name: String, recent: Int) throws(StorageError) -> StoredRoom? {
        if journal != nil, let unstored = writerQueue.sync(execute: { () -> StorageError? in
            handOffJournaled()
            return unstoredFailure(of: name)
        }) {
            throw unstored
        }
        return try readQueue.sync { RoomRead.room(name, recent: recent).answer(room: readRoom, page: readPage) }.map { answer in
            guard case .room(let room) = answer else { preconditionFailure("a room read answers with a room") }
            return room
        }.get()
    }

    /// Reads the room `name` (`RoomRead.room`), on `readQueue`.
    private func readRoom(_ name: String, recent: Int) throws(StorageError) -> StoredRoom? {
        do {
            return try reader.loadRoom(named: name, recent: recent)
        } catch {
            throw StorageError("cannot read room \(name): \(error)", sqlite: error)
        }
    }

    /// Reads a page of `room`'s history (`RoomRead.page`), on `readQueue`.
    private func readPage(
        of room: String, _ direction: HistoryDirection, from seq: UInt64, limit: Int, budget: Int,
        cost: (HistoryEntry) -> Int
    ) throws(StorageError) -> (entries: [HistoryEntry], complete: Bool) {
        do {
            return try reader.page(of: room, direction, from: seq, limit: limit, budget: budget, cost: cost)
        } catch {
            throw StorageError("cannot read the history of \(room): \(error)", sqlite: error)
        }
    }

    /// See `RoomStore.stage(_:)`.
    public func stage(_ batch: LogBatch) {
        staged.append(contentsOf: batch)
        for change in batch.occupancy { upkeep.occupancyChanged(of: change.room, occupied: change.occupied) }
    }

    /// Adds to the next commit the room's new `record` and, if given, its `event`: the single
    /// writes `stage(_:)` is made of, for tests that fill a store without a chat.
    public func stage(_ record: RoomRecord, event: HistoryEntry?) {
        stage(LogBatch(rooms: [record], events: event.map { [StoredEvent(room: record.name, entry: $0)] } ?? []))
    }

    /// Says that `room` has members now (`occupied`) or has none left (see `stage(_:)`).
    public func occupancyChanged(of room: String, occupied: Bool) {
        upkeep.occupancyChanged(of: room, occupied: occupied)
    }

    /// See `RoomStore.hasStagedChanges`.
    public var hasStagedChanges: Bool { !staged.hasNothingToWrite }

    /// See `RoomStore.commitStaged(on:completion:)`. With `.eventLoop`, the batch is committed
    /// and `completion` called before this returns, on the caller's queue (`queue` is not used).
    public func commitStaged(on queue: DispatchQueue, completion: @escaping @Sendable (Result<Void, CommitFailure>) -> Void) {
        let batch = staged
        staged = LogBatch()
        if journal != nil {
            let record = RoomJournal.Record(rooms: batch.rooms, chunks: RoomDatabase.encodedChunks(of: batch))
            if handedOff == 0, let result = appendToJournal(record, of: batch, under: Self.journalHoldBytes) {
                settle(batch, failed: result.isFailure)
                completion(result)
                return
            }
            // The database is a batch and more behind: this commit waits on the writer queue
            // for a hand-off, and those after it follow it there, in order.
            handedOff += 1
            writerQueue.async { [self] in
                var result = appendToJournal(record, of: batch, under: Self.journalHoldBytes)
                if result == nil {
                    handOffJournaled(lockWait: Self.backPressureLockWait)
                    result = appendToJournal(record, of: batch, under: Self.journalHoldBytes)
                }
                let committed = result ?? .failure(Self.failure(of: batch, behindBy: journaled.withLock { $0.bytes }))
                finished.withLock {
                    $0.append { [self, committed] in
                        handedOff -= 1
                        settle(batch, failed: committed.isFailure)
                        completion(committed)
                    }
                }
                queue.async { [self] in runFinishedCommits() }
            }
            return
        }
        writerQueue.async { [self] in
            var result: Result<Void, CommitFailure> = .success(())
            do throws(SQLiteError) {
                try writer.commit(batch)
            } catch {
                result = .failure(Self.failure(of: batch, error))
            }
            finished.withLock {
                $0.append { [self, result] in
                    settle(batch, failed: result.isFailure)
                    completion(result)
                }
            }
            queue.async { [self] in runFinishedCommits() }
            // A commit that takes everything past the total is trimmed back at once, after its
            // completion is handed over: the disk then exceeds the bound by one commit at most,
            // whatever clients manage to write between two timed passes.
            upkeep.trimIfOverTotal()
        }
    }

    /// Appends `record`, `batch`'s events, to the journal, unless the journal already holds
    /// `limit` bytes of records the database has not taken in (nil then, nothing written), and
    /// has a hand-off follow within `journalBatchInterval`, or at once past `journalBatchBytes`.
    /// From the server's queue, or from the writer queue for a commit waiting there.
    private func appendToJournal(_ record: RoomJournal.Record, of batch: LogBatch, under limit: Int) -> Result<Void, CommitFailure>? {
        guard let journal else { preconditionFailure("commits are journaled only with .eventLoop") }
        let appended: Result<Bool, StorageError>? = journaled.withLock { state in
            guard state.bytes < limit else { return nil }
            return Result { () throws(StorageError) -> Bool in
                // A commit that waited on the writer queue past shutdown.
                guard !state.closed else { throw StorageError("the store is closed") }
                let written = try journal.append(record)
                if durability == .always, !journal.sync() {
                    throw StorageError("cannot sync the journal: \(String(cString: strerror(errno)))")
                }
                state.records.append((record, written))
                for room in record.rooms { state.unstoredRooms[room.name, default: 0] += 1 }
                state.bytes += written
                state.newBytes += written
                if state.newBytes >= Self.journalBatchBytes, !state.handOffQueued {
                    // One at a time: queued behind each other, hand-offs of a few records each
                    // would keep the checkpointer's runs waiting behind them.
                    state.handOffQueued = true
                    return true
                }
                scheduleHandOff(&state)
                return false
            }
        }
        switch appended {
        case nil:
            return nil
        case .success(let full):
            if full { writerQueue.async { [weak self] in self?.handOffJournaled() } }
            return .success(())
        case .failure(let error):
            return .failure(CommitFailure(error: error, events: batch.events))
        }
    }

    /// Has a hand-off follow on the writer queue after `journalBatchInterval`, unless one is due
    /// already (`state` is `journaled`'s, under its lock).
    private func scheduleHandOff(_ state: inout JournaledRecords) {
        guard !state.handOffScheduled else { return }
        state.handOffScheduled = true
        writerQueue.asyncAfter(deadline: .now() + Self.journalBatchInterval) { [weak self] in self?.handOffJournaled() }
    }

    /// Writes the records journaled so far into the database in one transaction (on the writer
    /// queue), letting it wait `lockWait` at most for SQLite's lock; syncs the log; and deletes
    /// the journal files they came from (the next records go to a new file). A batch the
    /// database refuses stays in the journal and is tried again after `journalBatchInterval`.
    private func handOffJournaled(lockWait: Duration = handOffLockWait) {
        guard let journal else { return }
        let (taken, ended) = journaled.withLock { state -> ([(record: RoomJournal.Record, bytes: Int)], UInt64?) in
            state.handOffScheduled = false
            state.handOffQueued = false
            guard !state.closed, !state.records.isEmpty else { return ([], nil) }
            defer {
                state.records = []
                state.newBytes = 0
            }
            // Nothing appended since a hand-off that failed: its records are in the files
            // before the current one.
            let ended = journal.rotate() ?? journal.number - 1
            // The next file is there before the database names it as the first to expect.
            // Failing (no descriptor left, say), the next append tries again.
            try? journal.createCurrentFile()
            return (state.records, ended)
        }
        guard let ended else { return }
        let records = taken.map(\.record)
        let bytes = taken.reduce(0) { $0 + $1.bytes }
        writer.database.busyTimeout = lockWait
        defer { writer.database.busyTimeout = .seconds(5) }
        do throws(SQLiteError) {
            try writer.apply(records, firstJournalFile: ended + 1)
        } catch {
            // Logged there, once per interval however often hand-offs fail.
            health.failed(.database, "the journal's records could not be stored (they stay in the journal and are tried again): \(error)")
            // Waiting in files no sync would reach otherwise.
            if durability != .off { RoomJournal.sync(through: ended, in: directory.anchoredPath) }
            journaled.withLock { state in
                guard !state.closed else { return }
                state.records.insert(contentsOf: taken, at: 0)
                state.newBytes += bytes
                scheduleHandOff(&state)
            }
            return
        }
        health.succeeded(.database)
        // Only what the database holds durably leaves the journal.
        upkeep.syncLogNow()
        RoomJournal.remove(through: ended, in: directory.anchoredPath)
        journaled.withLock { state in
            state.bytes -= bytes
            for record in records {
                for room in record.rooms {
                    state.unstoredRooms[room.name]! -= 1
                    if state.unstoredRooms[room.name] == 0 { state.unstoredRooms[room.name] = nil }
                }
            }
        }
        upkeep.trimIfOverTotal()
    }

    /// Writes the records of every journal file in `directory` into `database`, in order, then
    /// makes them durable there and deletes the files: what a server that stopped before the
    /// writer took them in left. Returns the journal the new run appends to, its first file
    /// created and recorded as the first to expect (`RoomDatabase.JournalState`).
    ///
    /// When the journal cannot be shown to hold everything the last run acknowledged — a file
    /// it expected is missing or lost its header (deleted, emptied, renumbered), a record is cut
    /// short or altered (a power loss, or someone's hands), or the machine restarted since a run
    /// that did not sync each record stopped without syncing its journal — every stored room
    /// moves to a new epoch, and the server says why: a `seq` clients saw may otherwise name
    /// another event. Which rooms lost something cannot be told (the lost records named them), so
    /// all move. A file cut exactly where a record ends, on the same boot, is not detected (a
    /// power loss cannot do that without a reboot; docs/SERVER.md says so).
    private static func replayJournal(
        in directory: String, into database: RoomDatabase, durability: Durability, bootID: String, logger: Logger
    ) throws(StorageError) -> RoomJournal {
        let state: RoomDatabase.JournalState?
        do {
            state = try database.journalState()
        } catch {
            throw StorageError("cannot read the journal's state: \(error.message)", sqlite: error)
        }
        let files = RoomJournal.files(in: directory)
        var losses: [String] = []
        let restored = state?.bootID == RoomDatabase.backupCopyBootID
        if let state, !restored {
            let expected = files.filter { $0 >= state.firstFile }
            if expected.first != state.firstFile { losses.append("journal file \(state.firstFile) is missing") }
            for (file, next) in zip(expected, expected.dropFirst()) where next != file + 1 {
                losses.append("journal files \(file + 1) to \(next - 1) are missing")
            }
            if !state.cleanStop, !state.syncedEachRecord, state.bootID != bootID {
                losses.append("the machine restarted since the last run stopped without syncing its journal (boot \(state.bootID), now \(bootID))")
            }
        }
        var records = 0
        for file in files {
            let path = RoomJournal.path(of: file, in: directory)
            let read = try RoomJournal.read(path)
            if let state, file >= state.firstFile, read.number != file {
                losses.append("journal file \(file) has lost its header (emptied, cut inside it, or another file)")
            }
            if !read.intact {
                losses.append("journal file \(file) has a record cut short or altered after \(read.records.count) whole ones")
                logger.warning("the journal's last record was cut short; the records before it are kept", metadata: ["storage.file": "\(path)"])
            }
            do {
                try database.apply(read.records)
            } catch {
                throw StorageError("cannot replay the journal \(path): \(error.message)", sqlite: error)
            }
            records += read.records.count
        }
        if !losses.isEmpty || restored {
            // After the replay: its records carry the rooms' old epochs.
            let moved: Int
            do {
                moved = try database.renewEpochs()
            } catch {
                throw StorageError("cannot give the rooms new epochs: \(error.message)", sqlite: error)
            }
            if restored {
                logger.warning(
                    "started on a restored backup; every stored room moves to a new epoch, so clients that saw events after the backup see the break and page history again",
                    metadata: ["storage.rooms": "\(moved)"])
            } else {
                logger.error(
                    "the journal may not hold everything the last run acknowledged; every stored room moves to a new epoch, so clients see the break and page history again",
                    metadata: ["storage.losses": "\(losses.joined(separator: "; "))", "storage.rooms": "\(moved)"])
            }
        }
        // Created before the database names it; the replayed files go only once that is durable,
        // so a stop anywhere in between leaves files the next start expects.
        let journal = RoomJournal(directory: directory, firstNumber: max(state?.firstFile ?? 1, (files.last ?? 0) + 1))
        try journal.createCurrentFile()
        do {
            try database.setJournalState(
                RoomDatabase.JournalState(
                    firstFile: journal.number, bootID: bootID, cleanStop: false, syncedEachRecord: durability == .always))
            // Synced into the database before the files go.
            try database.database.execute("PRAGMA wal_checkpoint(FULL)")
        } catch {
            throw StorageError("cannot sync what the journal replayed: \(error.message)", sqlite: error)
        }
        journal.sync()
        if let last = files.last {
            RoomJournal.remove(through: last, in: directory)
            logger.notice("replayed the journal", metadata: ["storage.records": "\(records)", "storage.files": "\(files.count)"])
        }
        return journal
    }

    /// The machine's boot, as Linux names it (`/proc/sys/kernel/random/boot_id`), or
    /// `CHAT_SERVER_BOOT_ID` when set: a test knob that lets a process test play a restart of
    /// the machine. "unknown" when neither can be read.
    public static func currentBootID() -> String {
        if let given = getenv("CHAT_SERVER_BOOT_ID").map({ String(cString: $0) }), !given.isEmpty { return given }
        let descriptor = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return "unknown" }
        defer { Glibc.close(descriptor) }
        var bytes = [UInt8](repeating: 0, count: 64)
        let count = bytes.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
        guard count > 0 else { return "unknown" }
        return String(decoding: bytes[..<count].prefix { $0 > 0x20 }, as: UTF8.self)
    }

    /// What the journal holds that the database has not taken in yet: its bytes (a hand-off under
    /// way included) and the records no hand-off has taken. Zero without a journal.
    public var journalBacklog: (bytes: Int, records: Int) {
        journaled.withLock { ($0.bytes, $0.records.count) }
    }

    /// How many events the next commit holds so far (the commit-size histogram of `/metrics`).
    public var stagedEventCount: Int { staged.events.count }

    /// See `RoomStore.commitsOnCallersQueue`: true with `.eventLoop`, whose commits complete
    /// inside `commitStaged` unless they are handed to the writer queue (see above).
    public var commitsOnCallersQueue: Bool { placement == .eventLoop }

    /// See `RoomStore.runFinishedCommits()`.
    public func runFinishedCommits() {
        // Journaling on the loop with no commit waiting for a hand-off, nothing can have
        // finished on the writer queue: no lock taken for it (the server asks after every request).
        if placement == .eventLoop, handedOff == 0 { return }
        // A completion may serve requests that call this again: the outer loop runs the rest,
        // so completions never nest and always run in order.
        guard !runningFinished else { return }
        runningFinished = true
        defer { runningFinished = false }
        while let finish = finished.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) { finish() }
    }

    /// Waits for the commits in flight, stops retention and checkpoints and unlocks the
    /// directory (the connections close when the store is released). See `RoomStore.close()`.
    public func close() {
        if let journal {
            // Not written into the database now, which could wait on its lock: the journal is
            // synced, and the next start replays it.
            journaled.withLock { state in
                state.closed = true
                journal.sync()
            }
        }
        checkpointer?.stop()
        readQueue.sync {}
        upkeep.stop()
        if journal != nil {
            // The journal is synced and takes nothing more: the next start need not doubt it.
            // Not waited for long (a lock held elsewhere leaves the stop unclean, which costs
            // nothing unless the machine also restarts before the next start).
            writerQueue.sync {
                writer.database.busyTimeout = Self.handOffLockWait
                do {
                    try writer.markCleanStop()
                    try writer.database.execute("PRAGMA wal_checkpoint(PASSIVE)")
                } catch {
                    logger.warning("could not record a clean stop", metadata: ["storage.error": "\(error)"])
                }
            }
        }
        directory.unlock()
    }

    // MARK: Internals

    /// Why `batch` was not stored, with its events, whose senders are told.
    private static func failure(of batch: LogBatch, _ error: SQLiteError) -> CommitFailure {
        CommitFailure(error: StorageError("commit failed: \(error.message)", sqlite: error), events: batch.events)
    }

    /// Why `batch` was not journaled: the database stayed `bytes` of records behind the journal
    /// (its disk full, or its lock held elsewhere) for longer than `backPressureLockWait`.
    private static func failure(of batch: LogBatch, behindBy bytes: Int) -> CommitFailure {
        CommitFailure(
            error: StorageError("commit failed: the database is \(bytes) bytes behind the journal and is not taking them in"),
            events: batch.events)
    }

    /// Logs a checkpoint run at debug level: a test kills the server between the two lines.
    /// A failed run counts as a failed write of the database (`health` logs it, once per
    /// interval however often runs fail); a run that works says nothing of the hand-offs.
    private static func log(_ event: LogCheckpointer.Event, to logger: Logger, health: StorageHealth) {
        switch event {
        case .started(let frames):
            logger.debug("checkpoint started", metadata: ["storage.log.frames": "\(frames)"])
        case .finished(let run):
            if let error = run.error { health.failed(.database, "checkpoint failed: \(error)") }
            logger.debug(
                "checkpoint done",
                metadata: [
                    "storage.log.frames": "\(run.startFrames)", "storage.checkpoint.passes": "\(run.passivePasses)",
                    "storage.checkpoint.restarted": "\(run.restarted)", "storage.log.uncopied": "\(run.leftFrames)",
                ])
        }
    }

    /// After a commit (on the server's queue): if it failed, its rooms' records are staged again,
    /// newer staged records winning, so the next commit retries them.
    private func settle(_ batch: LogBatch, failed: Bool) {
        guard failed else { return }
        for record in batch.rooms { staged.addUnlessNewer(record) }
    }
}

extension Result {
    /// Whether this is a failure (the server counts failed commits by it).
    package var isFailure: Bool {
        if case .failure = self { return true }
        return false
    }
}
