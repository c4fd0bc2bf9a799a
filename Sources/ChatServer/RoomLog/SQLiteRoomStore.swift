import ChatProtocol
import ChatStorage
import Dispatch
import Glibc
import Logging
import SocketCore

/// The `RoomStore` the server runs on: SQLite in a data directory, written off the event loop.
///
/// Two connections: a writer, used only on `writerQueue`, which commits each batch in one
/// transaction and runs retention in small steps between commits; and a reader, used on the
/// server's queue for a joiner's room and for history pages older than memory holds (indexed
/// reads of at most a page of rows). WAL mode lets the reader read while the writer commits.
///
/// `@unchecked Sendable`: `staged`, `uncommitted`, `reader` and `runningFinished` are used on the
/// server's queue only; `writer` and `retentionTimer` on `writerQueue` only; `logSyncTimer`,
/// `logDescriptor` and `logSyncFailing` on `syncQueue` only; `finished` and `occupied` are behind
/// their locks.
public final class SQLiteRoomStore: RoomStore, @unchecked Sendable {
    /// The directory, locked for this store's lifetime.
    public let directory: DataDirectory
    /// How much history is kept on disk.
    public let retention: RetentionPolicy
    private let logger: Logger
    private let writerQueue = DispatchQueue(label: "ChatServer.storage")
    private let writer: RoomDatabase
    private let reader: RoomDatabase
    private var staged = RoomBatch()
    /// Index of each room's record in `staged.rooms`.
    private var stagedIndex: [String: Int] = [:]
    /// Per room, how many commits in flight (or staged) hold a change of it.
    private var uncommitted: [String: Int] = [:]
    private var retentionTimer: DispatchSourceTimer?
    /// Commits the writer has finished, oldest first, each with what to run for it on the
    /// server's queue: handed over through a lock, so the server can take them between requests
    /// (`runFinishedCommits`) rather than after everything already queued.
    private let finished = Locked<[@Sendable () -> Void]>([])
    /// Whether `runFinishedCommits` is running (on the server's queue).
    private var runningFinished = false
    /// The rooms that have members (`occupancyChanged`): written on the server's queue, read by
    /// retention on the writer's.
    private let occupied = Locked<Set<String>>([])

    private let syncQueue = DispatchQueue(label: "ChatServer.storage.sync")
    private var logSyncTimer: DispatchSourceTimer?
    /// The write-ahead log, opened read-only for `fdatasync` once it exists; -1 before.
    private var logDescriptor: Int32 = -1
    private var logSyncFailing = false

    /// How often, with `Durability.normal`, the write-ahead log is synced in the background: what
    /// a power loss can lose, and what keeps each checkpoint's own sync short.
    public static let logSyncInterval: Duration = .milliseconds(100)

    /// Events and rooms retention deletes per transaction: few, so a commit waiting behind it
    /// waits little.
    static let retentionStep = 256

    /// How often retention runs by default: how late the per-room, age and empty-room bounds
    /// may take effect. The total does not wait for it: a commit that passes it is trimmed at
    /// once (docs/SERVER.md, "Retention").
    public static let defaultRetentionInterval: Duration = .seconds(10)

    /// Opens (creating them if missing) the directory and its database. Throws a `StorageError`
    /// whose message names the path and the reason: an unwritable directory, a directory another
    /// server holds, a file that is not a database or has a newer schema.
    public init(
        directory path: String, durability: Durability, retention: RetentionPolicy,
        retentionInterval: Duration = defaultRetentionInterval, logger: Logger = Logger(label: "chat-server.storage")
    ) throws(StorageError) {
        directory = try DataDirectory(path: path)
        self.retention = retention
        self.logger = logger
        writer = try RoomDatabase(path: directory.databasePath, durability: durability, create: true)
        reader = try RoomDatabase(path: directory.databasePath, durability: durability, create: false)
        if retention != .keepAll {
            let interval = DispatchTimeInterval.milliseconds(max(1, Int(retentionInterval.milliseconds)))
            retentionTimer = writerQueue.startRepeatingTimer(every: interval, firstAfter: .nanoseconds(0)) { [weak self] in
                self?.applyRetention()
            }
        }
        if durability == .normal {
            // SQLite syncs the log only at a checkpoint, all 4 MiB at once, inside the commit that
            // triggers it: a stall of ~10 ms for every message behind it. Syncing every 100 ms
            // off the writer leaves the checkpoint little to sync, and bounds what a power loss
            // can take to the last 100 ms (docs/SERVER.md, "Durability").
            let interval = DispatchTimeInterval.milliseconds(Int(Self.logSyncInterval.milliseconds))
            logSyncTimer = syncQueue.startRepeatingTimer(every: interval, leeway: .milliseconds(10)) { [weak self] in
                self?.syncLog()
            }
        }
    }

    /// Caps the database file at about `bytes` (`PRAGMA max_page_count`): past it, commits fail
    /// with SQLITE_FULL as on a full disk. For tests of that failure.
    public func capFileSize(bytes: Int) throws(StorageError) {
        let result: Result<Void, SQLiteError> = writerQueue.sync {
            Result { () throws(SQLiteError) in
                let pageSize = try writer.database.integer("PRAGMA page_size") ?? 4096
                try writer.database.execute("PRAGMA max_page_count = \(max(1, Int64(bytes) / pageSize))")
            }
        }
        if case .failure(let error) = result { throw StorageError("cannot cap the database: \(error)", sqlite: error) }
    }

    // MARK: RoomStore

    /// See `RoomStore.loadRoom(named:recent:)`.
    public func loadRoom(named name: String, recent: Int) throws(StorageError) -> StoredRoom? {
        do {
            return try reader.loadRoom(named: name, recent: recent)
        } catch {
            throw StorageError("cannot read room \(name): \(error)", sqlite: error)
        }
    }

    /// See `RoomStore.page(of:_:from:limit:budget:cost:)`.
    public func page(
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
        if let index = stagedIndex[record.name] {
            staged.rooms[index] = record
        } else {
            stagedIndex[record.name] = staged.rooms.count
            staged.rooms.append(record)
            uncommitted[record.name, default: 0] += 1
        }
        if let event { staged.events.append(StoredEvent(room: record.name, entry: event)) }
    }

    /// See `RoomStore.occupancyChanged(of:occupied:)`.
    public func occupancyChanged(of room: String, occupied: Bool) {
        self.occupied.withLock { rooms in
            if occupied { rooms.insert(room) } else { rooms.remove(room) }
        }
    }

    /// See `RoomStore.hasUncommittedWrites(in:)`.
    public func hasUncommittedWrites(in room: String) -> Bool { uncommitted[room] != nil }

    /// See `RoomStore.hasStagedChanges`.
    public var hasStagedChanges: Bool { !staged.isEmpty }

    /// See `RoomStore.commitStaged(on:completion:)`.
    public func commitStaged(on queue: DispatchQueue, completion: @escaping @Sendable (Result<Void, CommitFailure>) -> Void) {
        let batch = staged
        staged = RoomBatch()
        stagedIndex.removeAll(keepingCapacity: true)
        writerQueue.async { [self] in
            var result: Result<Void, CommitFailure> = .success(())
            do throws(SQLiteError) {
                try writer.commit(batch)
            } catch {
                result = .failure(CommitFailure(error: StorageError("commit failed: \(error.message)", sqlite: error), events: batch.events))
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
            if (try? writer.isOverTotal(retention)) == true { applyRetention() }
        }
    }

    /// See `RoomStore.runFinishedCommits()`.
    public func runFinishedCommits() {
        // A completion may serve requests that call this again: the outer loop runs the rest,
        // so completions never nest and always run in order.
        guard !runningFinished else { return }
        runningFinished = true
        defer { runningFinished = false }
        while let finish = finished.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) { finish() }
    }

    /// Waits for the commits in flight, stops retention and unlocks the directory (the
    /// connections close when the store is released). See `RoomStore.close()`.
    public func close() {
        writerQueue.sync {
            retentionTimer?.cancel()
            retentionTimer = nil
        }
        syncQueue.sync {
            logSyncTimer?.cancel()
            logSyncTimer = nil
            if logDescriptor >= 0 { Glibc.close(logDescriptor) }
            logDescriptor = -1
        }
        directory.unlock()
    }

    // MARK: Internals

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

    /// Pushes what the writer appended to the log since the last sync to the disk (on `syncQueue`).
    private func syncLog() {
        if logDescriptor < 0 {
            // SQLite creates the log with the first write and removes it only when the last
            // connection closes, so once open the descriptor stays the log's.
            logDescriptor = open(directory.databasePath + "-wal", O_RDONLY | O_CLOEXEC)
            guard logDescriptor >= 0 else { return }
        }
        // Said once when syncing starts failing and once when it works again, not every 100 ms.
        if fdatasync(logDescriptor) != 0 {
            guard !logSyncFailing else { return }
            logSyncFailing = true
            let reason = String(cString: strerror(errno))
            logger.error(
                "cannot sync the write-ahead log: a power loss may lose more than the last 100 ms",
                metadata: ["storage.error": "\(reason)"])
        } else if logSyncFailing {
            logSyncFailing = false
            logger.notice("the write-ahead log is synced again")
        }
    }

    /// Deletes what `retention` no longer keeps, a step at a time, each step its own transaction
    /// on the writer queue so commits interleave.
    private func applyRetention() {
        do throws(SQLiteError) {
            let deleted = try writer.applyRetention(retention, now: Self.wallMillis(), maxDeletions: Self.retentionStep) { room in
                occupied.withLock { $0.contains(room) }
            }
            if deleted == Self.retentionStep {
                writerQueue.async { [weak self] in self?.applyRetention() }
            }
        } catch {
            logger.warning("retention failed", metadata: ["storage.error": "\(error)"])
        }
    }

    private static func wallMillis() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return UInt64(now.tv_sec) * 1000 + UInt64(now.tv_nsec) / 1_000_000
    }
}

extension Result {
    var isFailure: Bool {
        if case .failure = self { return true }
        return false
    }
}
