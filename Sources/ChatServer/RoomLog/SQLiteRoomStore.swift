import ChatProtocol
import ChatStorage
import Dispatch
import Glibc
import Logging
import SocketCore

/// Where `SQLiteRoomStore` commits a batch.
public enum CommitPlacement: String, Sendable, CaseIterable {
    /// On the caller's queue, inside `commitStaged`, as Redis appends to its log at the end of
    /// the event loop's turn: with `synchronous=NORMAL` a commit is a write(2) to the log (the
    /// fsync is the background sync's), so the loop pays no thread hop and deliveries are not
    /// held across one. Checkpoints run on the writer queue (`LogCheckpointer`), never in a commit.
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
/// With `.eventLoop`, a connection of the server's queue (`loopConnection`) commits, and
/// SQLite's own checkpoints are off; the writer connection runs retention and `checkpointer`'s
/// runs on `writerQueue`. SQLite allows one writer at a time: a commit that meets a retention
/// step or a checkpoint's restart pass waits for it, polling every 100 µs, for up to
/// `loopLockWait`; past that, or with the log at the checkpointer's cap, the batch is handed to
/// `writerQueue` as with `.writerThread` (its completion comes later, through
/// `runFinishedCommits`), and so are the commits after it until it completes. Commits report
/// what they changed through `ledger`, for retention's counts on the other connection.
///
/// Either way a third connection, `reader`, used only on `readQueue`, reads a joiner's room and
/// history pages older than memory holds (indexed reads of at most a page of rows): WAL mode
/// lets it read while the others commit, and the server's queue never waits for the disk to
/// read.
///
/// Retention and the log's background sync are `upkeep`'s, an object of its own (see
/// `StoreUpkeep` for why).
///
/// `@unchecked Sendable`: `staged`, `uncommitted`, `loopConnection`, `runningFinished` and `handedOff`
/// are used on the server's queue only; `writer` on `writerQueue` only; `reader` on `readQueue`
/// only; `finished` and `fileCap` are behind their locks.
public final class SQLiteRoomStore: RoomStore, @unchecked Sendable {
    /// The directory, locked for this store's lifetime.
    public let directory: DataDirectory
    /// How much history is kept on disk.
    public let retention: RetentionPolicy
    /// Where commits run.
    public let placement: CommitPlacement
    /// With `.eventLoop`, the write-ahead log's checkpoints; nil with `.writerThread` (SQLite's own).
    public let checkpointer: LogCheckpointer?
    private let logger: Logger
    private let writerQueue = DispatchQueue(label: "ChatServer.storage")
    private let writer: RoomDatabase
    /// With `.eventLoop`, the connection that commits on the server's queue; nil otherwise.
    private let loopConnection: RoomDatabase?
    private let readQueue = DispatchQueue(label: "ChatServer.storage.read")
    private let reader: RoomDatabase
    // The fields the server's queue uses skip run-time exclusivity checks: no access overlaps
    // another, and `stage` runs once per stored event (as in `ChatServer`).
    @exclusivity(unchecked) private var staged = RoomBatch()
    /// Index of each room's record in `staged.rooms`.
    @exclusivity(unchecked) private var stagedIndex: [String: Int] = [:]
    /// The index in `staged.rooms` of the room staged last: a busy room stages event after event,
    /// and finds itself here without hashing its name.
    @exclusivity(unchecked) private var lastStaged = 0
    /// Per room, how many commits in flight (or staged) hold a change of it.
    @exclusivity(unchecked) private var uncommitted: [String: Int] = [:]
    /// Commits the writer has finished, oldest first, each with what to run for it on the
    /// server's queue: handed over through a lock, so the server can take them between requests
    /// (`runFinishedCommits`) rather than after everything already queued.
    private let finished = Locked<[@Sendable () -> Void]>([])
    /// Whether `runFinishedCommits` is running (on the server's queue).
    @exclusivity(unchecked) private var runningFinished = false
    /// With `.eventLoop`: commits handed to the writer queue and not yet completed (on the
    /// server's queue). While there are any, later commits follow them there.
    @exclusivity(unchecked) private var handedOff = 0
    /// Retention and the log's background sync.
    private let upkeep: StoreUpkeep
    /// With `.eventLoop`: a file cap (`capFileSize`) the loop's connection takes at its next commit.
    private let fileCap = Locked<Int?>(nil)
    /// With `.eventLoop`: the journal each commit is appended to (WORK IN PROGRESS, issue 22).
    private let journal: RoomJournal?
    /// What the journal holds that the database has not taken in yet, behind a lock: appends
    /// come from the server's queue, hand-offs from the writer queue, and reads and `close()`
    /// from wherever they are called.
    private let journaled = Locked(JournaledRecords())
    /// How long records wait in the journal before the database takes them in, and how many
    /// bytes of them at most.
    static let journalBatchInterval: DispatchTimeInterval = .milliseconds(100)
    static let journalBatchBytes = 4 << 20

    /// The journal's records not yet in the database.
    struct JournaledRecords {
        var records: [RoomJournal.Record] = []
        var bytes = 0
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
    public init(
        directory path: String, durability: Durability, retention: RetentionPolicy,
        retentionInterval: Duration = defaultRetentionInterval, commitPlacement: CommitPlacement = .eventLoop,
        checkpointPolicy: LogCheckpointer.Policy? = nil, logger: Logger = Logger(label: "chat-server.storage")
    ) throws(StorageError) {
        directory = try DataDirectory(path: path)
        self.retention = retention
        self.logger = logger
        placement = commitPlacement
        writer = try RoomDatabase(path: directory.databasePath, durability: durability, create: true)
        reader = try RoomDatabase(path: directory.databasePath, durability: durability, create: false)
        if commitPlacement == .eventLoop {
            let loopConnection = try RoomDatabase(path: directory.databasePath, durability: durability, create: false)
            let checkpointer = LogCheckpointer(
                connection: writer.database, queue: writerQueue, policy: checkpointPolicy ?? Self.checkpointPolicyFromEnvironment()
            ) { [logger] event in Self.log(event, to: logger) }
            // Retention's commits grow the log too.
            checkpointer.watch(loopConnection.database)
            checkpointer.watch(writer.database)
            self.loopConnection = loopConnection
            self.checkpointer = checkpointer
        } else {
            loopConnection = nil
            checkpointer = nil
        }
        if commitPlacement == .eventLoop {
            try Self.replayJournal(in: directory.path, into: writer, logger: logger)
            journal = RoomJournal(directory: directory.path)
        } else {
            journal = nil
        }
        upkeep = StoreUpkeep(
            retention: retention, placement: commitPlacement, writer: writer, writerQueue: writerQueue,
            databasePath: directory.databasePath, journal: journal, logger: logger)
        upkeep.start(retentionInterval: retentionInterval, logSyncInterval: Self.logSyncInterval, durability: durability)
    }

    /// Caps the database file at about `bytes` (`PRAGMA max_page_count`): past it, commits fail
    /// with SQLITE_FULL as on a full disk. For tests of that failure. With `.eventLoop` the
    /// committing connection takes the cap at its next commit, on the server's queue.
    public func capFileSize(bytes: Int) throws(StorageError) {
        journal?.sizeCap = bytes
        if placement == .eventLoop {
            fileCap.withLock { $0 = bytes }
            return
        }
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
        guard journal != nil, journaled.withLock({ !$0.records.isEmpty }) else { return read() }
        // Events only in the journal: the database takes them first, and the read follows.
        writerQueue.async { [self] in
            handOffJournaled()
            read()
        }
    }

    /// The stored room `name` with its `recent` newest events, or nil if none is stored, read
    /// now, the caller waiting: for tests and tools, not the server's queue.
    public func loadRoom(named name: String, recent: Int) throws(StorageError) -> StoredRoom? {
        if journal != nil { writerQueue.sync { handOffJournaled() } }
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

    /// See `RoomStore.stage(_:event:)`.
    public func stage(_ record: RoomRecord, event: HistoryEntry?) {
        if isStagedLast(record.name) {
            staged.rooms[lastStaged] = record
        } else if let index = stagedIndex[record.name] {
            staged.rooms[index] = record
            lastStaged = index
        } else {
            lastStaged = staged.rooms.count
            stagedIndex[record.name] = lastStaged
            staged.rooms.append(record)
            uncommitted[record.name, default: 0] += 1
        }
        if let event { staged.events.append(StoredEvent(room: record.name, entry: event)) }
    }

    /// See `RoomStore.stage(_:advancing:at:)`: a busy room's messages, one after another in a
    /// commit, update its staged record in place.
    public func stage(_ event: HistoryEntry, advancing room: String, at time: UInt64) -> Bool {
        guard isStagedLast(room) else { return false }
        staged.rooms[lastStaged].lastSeq = event.seq
        staged.rooms[lastStaged].lastActive = time
        staged.events.append(StoredEvent(room: room, entry: event))
        return true
    }

    /// Whether `room`'s record is the one staged last (`lastStaged`), found without hashing.
    private func isStagedLast(_ room: String) -> Bool {
        lastStaged < staged.rooms.count && staged.rooms[lastStaged].name == room
    }

    /// See `RoomStore.occupancyChanged(of:occupied:)`.
    public func occupancyChanged(of room: String, occupied: Bool) {
        upkeep.occupancyChanged(of: room, occupied: occupied)
    }

    /// See `RoomStore.hasUncommittedWrites(in:)`.
    public func hasUncommittedWrites(in room: String) -> Bool { uncommitted[room] != nil }

    /// See `RoomStore.hasStagedChanges`.
    public var hasStagedChanges: Bool { !staged.isEmpty }

    /// See `RoomStore.commitStaged(on:completion:)`. With `.eventLoop`, the batch is committed
    /// and `completion` called before this returns, on the caller's queue (`queue` is not used).
    public func commitStaged(on queue: DispatchQueue, completion: @escaping @Sendable (Result<Void, CommitFailure>) -> Void) {
        let batch = staged
        staged = RoomBatch()
        stagedIndex.removeAll(keepingCapacity: true)
        if let journal {
            let record = RoomJournal.Record(rooms: batch.rooms, chunks: RoomDatabase.encodedChunks(of: batch))
            let appended: Result<Bool, StorageError> = journaled.withLock { state in
                Result { () throws(StorageError) -> Bool in
                    try journal.append(record)
                    state.records.append(record)
                    state.bytes += record.chunks.reduce(0) { $0 + $1.blob.count }
                    if state.bytes >= Self.journalBatchBytes, !state.handOffQueued {
                        // One at a time: queued behind each other, hand-offs of a few records
                        // each would keep the checkpointer's runs waiting behind them.
                        state.handOffQueued = true
                        return true
                    }
                    if !state.handOffScheduled {
                        state.handOffScheduled = true
                        writerQueue.asyncAfter(deadline: .now() + Self.journalBatchInterval) { [weak self] in self?.handOffJournaled() }
                    }
                    return false
                }
            }
            switch appended {
            case .success(let full):
                settle(batch, failed: false)
                if full { writerQueue.async { [weak self] in self?.handOffJournaled() } }
                completion(.success(()))
            case .failure(let error):
                settle(batch, failed: true)
                completion(.failure(CommitFailure(error: error, events: batch.events)))
            }
            return
        }
        if placement == .eventLoop {
            // Behind a commit handed to the writer, this one goes there too: committed first,
            // this batch's events would not come after that one's. With the log at its cap, the
            // writer queue takes it after the checkpoint run under way: the log stops growing.
            if handedOff == 0, checkpointer?.isOverCap != true, let result = commitOnLoop(batch) {
                settle(batch, failed: result.isFailure)
                completion(result)
                return
            }
            handedOff += 1
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
                    if placement == .eventLoop { handedOff -= 1 }
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

    /// Writes the records journaled so far into the database in one transaction (on the writer
    /// queue), syncs the log, and deletes the journal files they came from; the next records go
    /// to a new file. A batch the database refuses stays in the journal and is tried again.
    private func handOffJournaled() {
        guard let journal else { return }
        let (records, ended) = journaled.withLock { state -> ([RoomJournal.Record], UInt64?) in
            state.handOffScheduled = false
            state.handOffQueued = false
            guard !state.closed else { return ([], nil) }
            defer { state.records = [] }
            state.bytes = 0
            return (state.records, state.records.isEmpty ? nil : journal.rotate())
        }
        guard !records.isEmpty else { return }
        writer.database.busyTimeout = Self.handOffLockWait
        defer { writer.database.busyTimeout = .seconds(5) }
        do throws(SQLiteError) {
            try writer.apply(records)
        } catch {
            logger.error(
                "the journal's records could not be stored; they stay in the journal and are tried again",
                metadata: ["storage.error": "\(error)"])
            journaled.withLock { state in
                guard !state.closed else { return }
                state.records.insert(contentsOf: records, at: 0)
                state.bytes += records.reduce(0) { $0 + $1.chunks.reduce(0) { $0 + $1.blob.count } }
                if !state.handOffScheduled {
                    state.handOffScheduled = true
                    writerQueue.asyncAfter(deadline: .now() + Self.journalBatchInterval) { [weak self] in self?.handOffJournaled() }
                }
            }
            return
        }
        upkeep.syncLogNow()
        if let ended { RoomJournal.remove(through: ended, in: directory.path) }
        // Nothing else writes the database now: a checkpoint here copies what the batch added and
        // lets the next batch start the log over (EXPERIMENT: every hand-off).
        _ = try? writer.database.execute("PRAGMA wal_checkpoint(RESTART)")
        upkeep.trimIfOverTotal()
    }

    /// Writes the records of every journal file in `directory` into `database`, in order, then
    /// makes them durable there and deletes the files: what a server that stopped before the
    /// writer took them in left. A file cut short (a power loss) is read up to its torn record.
    private static func replayJournal(in directory: String, into database: RoomDatabase, logger: Logger) throws(StorageError) {
        let files = RoomJournal.files(in: directory)
        guard let last = files.last else { return }
        var records = 0
        for file in files {
            let path = RoomJournal.path(of: file, in: directory)
            let read = try RoomJournal.read(path)
            if !read.intact {
                logger.warning("the journal's last record was cut short; the records before it are kept", metadata: ["storage.file": "\(path)"])
            }
            do {
                try database.apply(read.records)
            } catch {
                throw StorageError("cannot replay the journal \(path): \(error.message)", sqlite: error)
            }
            records += read.records.count
        }
        do {
            // Synced into the database before the files go.
            try database.database.execute("PRAGMA wal_checkpoint(FULL)")
        } catch {
            throw StorageError("cannot sync what the journal replayed: \(error.message)", sqlite: error)
        }
        RoomJournal.remove(through: last, in: directory)
        logger.notice("replayed the journal", metadata: ["storage.records": "\(records)", "storage.files": "\(files.count)"])
    }

    /// How many events the next commit holds so far (the commit-size histogram of `/metrics`).
    public var stagedEventCount: Int { staged.events.count }

    /// See `RoomStore.commitsOnCallersQueue`: true with `.eventLoop`, whose commits complete
    /// inside `commitStaged` unless they are handed to the writer queue (see above).
    public var commitsOnCallersQueue: Bool { placement == .eventLoop }

    /// See `RoomStore.runFinishedCommits()`.
    public func runFinishedCommits() {
        // Committing on the loop with nothing handed to the writer, nothing can have finished
        // there: no lock taken for it (the server asks after every request).
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
        directory.unlock()
    }

    // MARK: Internals

    /// How long a commit on the loop waits for the write lock before it hands its batch to the
    /// writer queue instead: our own holders (a retention step, a checkpoint's restart pass)
    /// let go sooner; another process holding the lock (an administrator's `sqlite3` shell, a
    /// backup) would otherwise stall every client for the 5 s SQLite waits.
    static let loopLockWait: Duration = .milliseconds(2)

    /// Commits `batch` through `loopConnection` (`.eventLoop`, on the server's queue) and
    /// reports what it changed to retention; nil, having written nothing, if another connection
    /// held the write lock for longer than `loopLockWait`.
    private func commitOnLoop(_ batch: RoomBatch) -> Result<Void, CommitFailure>? {
        guard let loopConnection else { preconditionFailure("commits run on the loop only with .eventLoop") }
        if let bytes = fileCap.withLock({ cap in defer { cap = nil }; return cap }) {
            do throws(SQLiteError) {
                try Self.cap(loopConnection.database, bytes: bytes)
            } catch {
                logger.warning("cannot cap the database", metadata: ["storage.error": "\(error)"])
            }
        }
        loopConnection.database.busyTimeout = Self.loopLockWait
        defer { loopConnection.database.busyTimeout = .seconds(5) }
        let committed: Result<CommittedChanges, SQLiteError>
        var checkTotal = false
        if retention == .keepAll {
            committed = Result { () throws(SQLiteError) in try loopConnection.commit(batch) }
        } else {
            committed = upkeep.ledger.withLock { ledger in
                let result = Result { () throws(SQLiteError) in try loopConnection.commit(batch) }
                if case .success(let changes) = result { checkTotal = ledger.add(changes, maxTotalBytes: retention.maxTotalBytes) }
                return result
            }
        }
        switch committed {
        case .success:
            if checkTotal { upkeep.checkTotal() }
            return .success(())
        case .failure(let error) where error.isBusy:
            return nil
        case .failure(let error):
            return .failure(Self.failure(of: batch, error))
        }
    }

    /// Why `batch` was not stored, with its events, whose senders are told.
    private static func failure(of batch: RoomBatch, _ error: SQLiteError) -> CommitFailure {
        CommitFailure(error: StorageError("commit failed: \(error.message)", sqlite: error), events: batch.events)
    }

    /// Logs a checkpoint run at debug level: a test kills the server between the two lines.
    private static func log(_ event: LogCheckpointer.Event, to logger: Logger) {
        switch event {
        case .started(let frames):
            logger.debug("checkpoint started", metadata: ["storage.log.frames": "\(frames)"])
        case .finished(let run):
            if let error = run.error {
                logger.warning("checkpoint failed", metadata: ["storage.error": "\(error)"])
            }
            logger.debug(
                "checkpoint done",
                metadata: [
                    "storage.log.frames": "\(run.startFrames)", "storage.checkpoint.passes": "\(run.passivePasses)",
                    "storage.checkpoint.restarted": "\(run.restarted)", "storage.log.uncopied": "\(run.leftFrames)",
                ])
        }
    }

    /// After a commit (on the server's queue): its rooms are settled, unless it failed; then their
    /// records are staged again, newer staged records winning, so the next commit retries them.
    private func settle(_ batch: RoomBatch, failed: Bool) {
        for record in batch.rooms {
            if failed, stagedIndex[record.name] == nil {
                // Staged again, it keeps this commit's count in `uncommitted`.
                stagedIndex[record.name] = staged.rooms.count
                staged.rooms.append(record)
                continue
            }
            uncommitted[record.name, default: 1] -= 1
            if uncommitted[record.name] == 0 { uncommitted[record.name] = nil }
        }
    }
}

extension Result {
    var isFailure: Bool {
        if case .failure = self { return true }
        return false
    }
}
