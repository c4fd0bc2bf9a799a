import Dispatch
import Glibc

/// Checkpoints a database's write-ahead log on a queue of its own, never inside a commit, and
/// brings the log back to its start, so that it stays bounded while commits go on.
///
/// Why it is more than a background `PRAGMA wal_checkpoint`: a checkpoint copies the frames the
/// log held when it began; frames committed meanwhile stay uncopied. SQLite's writer starts the
/// log over (writes from its first frame again) only when it begins a transaction with every
/// frame copied and no reader left in the log (wal.c, `walRestartLog`); otherwise it appends. A
/// passive checkpoint on another connection, which syncs the log and the file and so takes
/// milliseconds, never sees every frame copied while commits keep coming, and the log grows
/// without end (75–87 MB in 5 s when we tried).
///
/// So a run, started once a commit leaves `Policy.thresholdFrames` in the log, makes a passive
/// pass (or `Policy.maxPassivePasses`, while what is left uncopied stays over
/// `Policy.restartFrames`) while commits go on, then a restart pass: it holds the write lock
/// while it copies what the commits added meanwhile and syncs, so commits wait for about one
/// small checkpoint, and the next commit starts the log over. SQLite cuts the file back to
/// `journal_size_limit` with the first commit after the log starts over.
///
/// `SQLiteRoomStore` commits on the run's own queue (its hand-offs of the journal and
/// retention), so nothing commits during a run: its first pass copies every frame no reader
/// still needs, and the log holds at most the threshold and the commit that crossed it. What a
/// reader's older snapshot kept back is left to the restart pass, which waits for the reader.
///
/// The connection is used on `queue` only (the caller may run its own work there too, such as
/// retention, as long as it leaves no transaction open). `logGrew(to:)` may be called from any
/// thread; `stop()` from any but `queue`. `@unchecked Sendable`: `state` is behind its mutex.
public final class LogCheckpointer: @unchecked Sendable {
    /// When a run starts and how it catches up.
    public struct Policy: Sendable, Equatable {
        /// A run starts once a commit leaves this many frames (pages) in the log.
        public var thresholdFrames: Int
        /// A run ends with a restart pass once at most this many frames are left uncopied: what
        /// commits wait for while it holds the write lock.
        public var restartFrames: Int
        /// Passive passes before the restart pass, however much is left. Each pass syncs the log
        /// and the file, and commits go on meanwhile: past the first, a pass seldom leaves much
        /// less than the one before it.
        public var maxPassivePasses: Int
        /// How long a run waits after its first passive pass, with the database file partly
        /// written from the log: 0 but in tests, which widen that window to kill a server inside
        /// a run for certain rather than by luck (`CheckpointKillTests`).
        public var pauseAfterFirstPass: Duration = .zero

        /// A run every `thresholdFrames` frames, ending with a restart once at most an eighth of
        /// that (at least 8 frames) is left, or after `maxPassivePasses` passive passes.
        public init(thresholdFrames: Int, restartFrames: Int? = nil, maxPassivePasses: Int = 2) {
            self.thresholdFrames = max(1, thresholdFrames)
            self.restartFrames = restartFrames ?? max(8, thresholdFrames / 8)
            self.maxPassivePasses = max(1, maxPassivePasses)
        }

        /// SQLite's own threshold, 1,000 pages (about 4 MiB of log with 4 KiB pages).
        public static let standard = Policy(thresholdFrames: 1_000)
    }

    /// What one run did.
    public struct Run: Sendable {
        /// Frames in the log when it began.
        public var startFrames: Int
        /// Passive passes made.
        public var passivePasses = 0
        /// Whether it ended with a restart pass.
        public var restarted = false
        /// Frames left uncopied when it ended: 0 when the next commit starts the log over.
        public var leftFrames = 0
        /// Why it stopped early, if it failed.
        public var error: SQLiteError?
    }

    /// What the checkpointer tells its owner, on its queue: for logs and tests.
    public enum Event: Sendable {
        /// A run is about to begin, with this many frames in the log.
        case started(frames: Int)
        /// A run is over.
        case finished(Run)
    }

    /// When runs start and how they catch up.
    public let policy: Policy
    private let connection: SQLiteDatabase
    private let queue: DispatchQueue
    private let report: @Sendable (Event) -> Void
    private let state = CheckpointState()

    /// Checkpoints through `connection` on `queue` (which alone uses it from now on), telling
    /// `report` when each run starts and ends. Nothing runs until a watched connection's commit
    /// (or `logGrew(to:)`) says the log reached the threshold.
    public init(
        connection: SQLiteDatabase, queue: DispatchQueue, policy: Policy = .standard,
        report: @escaping @Sendable (Event) -> Void = { _ in }
    ) {
        self.connection = connection
        self.queue = queue
        self.policy = policy
        self.report = report
    }

    /// Turns `database`'s own checkpoints off and has its commits report the log's size here.
    /// Call on the queue that uses `database`, before its first commit.
    public func watch(_ database: SQLiteDatabase) {
        // Weak: the checkpointer's own connection is watched too (retention commits through it).
        database.observeCommits { [weak self] frames in self?.logGrew(to: frames) }
    }

    /// A commit left `frames` frames in the log: starts a run on the queue if that reaches the
    /// threshold and none is pending.
    public func logGrew(to frames: Int) {
        let start = state.withLock { state -> Bool in
            state.latestFrames = frames
            guard frames >= policy.thresholdFrames, !state.scheduled, !state.stopped else { return false }
            state.scheduled = true
            return true
        }
        if start { queue.async { [self] in run() } }
    }

    /// Stops starting runs; one in progress finishes first. Call from another queue than
    /// `queue`, before the connections close.
    public func stop() {
        state.withLock { $0.stopped = true }
        queue.sync {}
    }

    /// One run (on `queue`): passive passes while they catch up, then a restart pass, unless a
    /// pass copied everything the last commit left.
    private func run() {
        let (stopped, frames) = state.withLock { ($0.stopped, $0.latestFrames) }
        guard !stopped else { return }
        report(.started(frames: frames))
        var run = Run(startFrames: frames)
        do throws(SQLiteError) {
            var progress = try connection.checkpoint(.passive)
            run.passivePasses = 1
            if policy.pauseAfterFirstPass > .zero {
                let (seconds, attoseconds) = policy.pauseAfterFirstPass.components
                usleep(useconds_t(clamping: seconds * 1_000_000 + attoseconds / 1_000_000_000_000))
            }
            while true {
                // The last commit's count, not the pass's: the frames committed during the pass
                // are what is left. Negative once the log started over after a complete pass.
                run.leftFrames = max(0, state.withLock { $0.latestFrames } - progress.copiedFrames)
                guard run.leftFrames > 0 else { break }
                if run.leftFrames <= policy.restartFrames || run.passivePasses >= policy.maxPassivePasses {
                    progress = try connection.checkpoint(.restart)
                    run.restarted = true
                    run.leftFrames = progress.completed ? 0 : progress.logFrames - progress.copiedFrames
                    break
                }
                progress = try connection.checkpoint(.passive)
                run.passivePasses += 1
            }
        } catch {
            run.error = error
        }
        // The next commit at or over the threshold starts another run; counting on the frames
        // seen now would start one at once, before the log started over.
        state.withLock { $0.scheduled = false }
        report(.finished(run))
    }
}

/// The checkpointer's state shared with committing threads, behind a pthread mutex (which
/// ThreadSanitizer sees, unlike `Synchronization.Mutex` on Linux).
private final class CheckpointState: @unchecked Sendable {
    struct Fields {
        /// Frames in the log after the last commit any watched connection made.
        var latestFrames = 0
        /// Whether a run is queued or running.
        var scheduled = false
        /// Whether `stop()` was called.
        var stopped = false
    }

    // On the heap: a pthread mutex must not move once initialised.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private var fields = Fields()

    init() { pthread_mutex_init(mutex, nil) }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    func withLock<Result>(_ body: (inout Fields) -> Result) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return body(&fields)
    }
}
