import ChatCore
import ChatStorage
import Dispatch
import Glibc
import Logging
import SocketCore

/// What `SQLiteRoomStore` does besides committing and reading: retention, in small steps on
/// the writer queue, and the write-ahead log's background sync, on a queue of its own.
///
/// Its own object so that its timers and queued steps can hold it weakly without the store
/// being weakly referenced: a weak reference gives an object a side table, and then every
/// retain and release of it takes the runtime's slow path. The server retains the store a few
/// times per request; with the side table on the store, that was 2% of durable mode's CPU at
/// 50 clients (`perf`, docs/BENCHMARKS.md).
///
/// `@unchecked Sendable`: `writer`, `retentionTimer` are used on `writerQueue` only;
/// `logSyncTimer`, `logDescriptor` and `failingSyncs` on `syncQueue` only; `occupied` is
/// behind its lock.
final class StoreUpkeep: @unchecked Sendable {
    /// Events and rooms retention deletes per transaction: few, so a commit waiting behind it
    /// waits little.
    static let retentionStep = 256

    let retention: RetentionPolicy
    private let writer: RoomDatabase
    private let writerQueue: DispatchQueue
    private let logPath: String
    private let logger: Logger
    /// The rooms that have members (`occupancyChanged`): written on the server's queue, read by
    /// retention on the writer's.
    private let occupied = Locked<Set<String>>([])
    private var retentionTimer: DispatchSourceTimer?

    private let syncQueue = DispatchQueue(label: "ChatServer.storage.sync")
    private var logSyncTimer: DispatchSourceTimer?
    /// The write-ahead log, opened read-only for `fdatasync` once it exists; -1 before.
    private var logDescriptor: Int32 = -1
    /// What is failing to sync (`report`), so that its recovery is reported once.
    private var failingSyncs: Set<String> = []
    /// The journal in front of the database, synced with the log.
    private let journal: RoomJournal?
    /// Where failed syncs and retention steps are counted and logged.
    private let health: StorageHealth

    /// Upkeep for the database at `databasePath`, run through `writer` on `writerQueue`. Starts
    /// nothing: see `start`.
    init(
        retention: RetentionPolicy, writer: RoomDatabase, writerQueue: DispatchQueue,
        databasePath: String, journal: RoomJournal?, health: StorageHealth, logger: Logger
    ) {
        self.journal = journal
        self.health = health
        self.retention = retention
        self.writer = writer
        self.writerQueue = writerQueue
        logPath = databasePath + "-wal"
        self.logger = logger
    }

    /// Starts retention's passes every `retentionInterval` (unless everything is kept) and, with
    /// `Durability.normal`, the log's sync every `logSyncInterval`.
    func start(retentionInterval: Duration, logSyncInterval: Duration, durability: Durability) {
        if retention != .keepAll {
            let interval = DispatchTimeInterval.milliseconds(max(1, Int(retentionInterval.milliseconds)))
            retentionTimer = writerQueue.startRepeatingTimer(every: interval, firstAfter: .nanoseconds(0)) { [weak self] in
                self?.applyRetention()
            }
        }
        if durability == .normal {
            // SQLite syncs the log only at a checkpoint, all 4 MiB at once: inside the commit that
            // triggers it (`.writerThread`), a stall of ~10 ms for every message behind it.
            // Syncing every 100 ms off the writer leaves the checkpoint little to sync, and
            // bounds what a power loss can take to the last 100 ms (docs/SERVER.md, "Durability").
            let interval = DispatchTimeInterval.milliseconds(Int(logSyncInterval.milliseconds))
            logSyncTimer = syncQueue.startRepeatingTimer(every: interval, leeway: .milliseconds(10)) { [weak self] in
                self?.syncLog()
            }
        }
    }

    /// Stops the timers and closes the log's descriptor, once the writer queue's and the sync
    /// queue's current work is done.
    func stop() {
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
    }

    /// Notes whether `room` has members: retention does not delete an occupied room.
    func occupancyChanged(of room: String, occupied: Bool) {
        self.occupied.withLock { rooms in
            if occupied { rooms.insert(room) } else { rooms.remove(room) }
        }
    }

    /// Runs retention if commits took everything past the total (on `writerQueue`).
    func trimIfOverTotal() {
        do throws(SQLiteError) {
            if try writer.isOverTotal(retention) { applyRetention() }
        } catch {
            health.failed(.database, "retention failed: \(error)")
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
            health.failed(.database, "retention failed: \(error)")
        }
    }

    /// Syncs the log now, waiting for it (on the writer queue, before journal files it took in
    /// are deleted: the journal's current file is the timer's to sync).
    func syncLogNow() {
        syncQueue.sync { if logSyncTimer != nil { report(synced: syncLogFile(), what: "the write-ahead log") } }
    }

    /// Pushes what was appended to the journal and the log since the last sync to the disk (on
    /// `syncQueue`, every `logSyncInterval`).
    private func syncLog() {
        if let journal { report(synced: journal.sync(), what: "the journal") }
        report(synced: syncLogFile(), what: "the write-ahead log")
    }

    /// `fdatasync`s the log; true if it worked or there is no log yet.
    private func syncLogFile() -> Bool {
        if logDescriptor < 0 {
            // SQLite creates the log with the first write and removes it only when the last
            // connection closes, so once open the descriptor stays the log's.
            logDescriptor = open(logPath, O_RDONLY | O_CLOEXEC)
            guard logDescriptor >= 0 else { return true }
        }
        return fdatasync(logDescriptor) == 0
    }

    /// Counts a sync of `what` that failed as a failed write of its part (`StorageHealth` logs it
    /// once when syncing starts failing, then once per interval, not every 100 ms), and says when
    /// it works again (on `syncQueue`; `errno` is the failed call's).
    private func report(synced: Bool, what: String) {
        let part: StorageHealth.Part = what == "the journal" ? .journal : .database
        if !synced {
            failingSyncs.insert(what)
            let reason = String(cString: strerror(errno))
            health.failed(part, "cannot sync \(what): \(reason); a power loss may lose more than the last 100 ms")
        } else if failingSyncs.remove(what) != nil {
            health.succeeded(part)
        }
    }

    private static func wallMillis() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return UInt64(now.tv_sec) * 1000 + UInt64(now.tv_nsec) / 1_000_000
    }
}
