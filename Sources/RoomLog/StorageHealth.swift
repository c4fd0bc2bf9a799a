import Dispatch
import Glibc
import Logging
import SocketCore

/// Whether what a durable server writes reaches its files: every failed write of each part of
/// the data directory counted, whether each part is failing now (and why), and the log lines
/// that say so — one when a part starts failing, at most one per `logInterval` while it goes on
/// (with how many failures it stands for), and one when it works again.
///
/// Why one object for all four parts: `/metrics`, `/status` and `/healthz` must agree, and each
/// part fails on its own thread (the journal on the server's queue, the database on the storage
/// writer's, accounts and moderation on their stores' queues); a disk that fills fails them all,
/// and 3,473 lines of "commit failed" in 35 s told an operator less than one line a part and a
/// count.
///
/// A part is failing from a failed write until its next write succeeds: there is no timer that
/// declares it well without evidence. The journal and the database write every tenth of a second
/// while the chat is busy; accounts and moderation write only when someone registers or an op
/// bans, so after fixing their files an operator sees them healthy at their next write (the
/// failure counters' `increase()` is the alert to use for them, docs/OPERATIONS.md).
///
/// Threading: every method may be called from any thread; the state is behind `state`'s lock,
/// and the logger is swift-log's (thread-safe).
public final class StorageHealth: Sendable {
    /// The parts of the data directory that are written.
    public enum Part: String, Sendable, CaseIterable {
        /// The journal in front of the database (commits on the event loop).
        case journal
        /// `rooms.sqlite3`: hand-offs from the journal, commits on the writer thread, retention,
        /// checkpoints, the log's sync.
        case database
        /// `accounts.sqlite`.
        case accounts
        /// `moderation.sqlite`: registered rooms and server bans.
        case moderation
    }

    /// One part's health, as reported.
    public struct Report: Sendable, Equatable {
        /// The part.
        public var part: Part
        /// Failed writes since the server started.
        public var failures: Int
        /// Why the last write failed, while it is failing; nil when its last write worked.
        public var failing: String?
    }

    private struct PartState {
        var failures = 0
        var failing: String?
        /// When the last line about it was written (uptime nanoseconds), and failures since.
        var loggedAt: UInt64 = 0
        var unlogged = 0
    }

    private let state = Locked([Part: PartState]())
    private let logger: Logger
    private let logInterval: UInt64

    /// Health logged through `logger`, a line per part at most every `logInterval` while it fails.
    public init(logger: Logger, logInterval: Duration = .seconds(10)) {
        self.logger = logger
        self.logInterval = UInt64(logInterval / .nanoseconds(1))
    }

    /// A write of `part` failed with `error` (a sentence naming the file and the reason).
    public func failed(_ part: Part, _ error: String) {
        let now = DispatchTime.now().uptimeNanoseconds
        let line: (repeats: Int, first: Bool)? = state.withLock { parts in
            var entry = parts[part] ?? PartState()
            defer { parts[part] = entry }
            entry.failures += 1
            let first = entry.failing == nil
            entry.failing = error
            guard first || now &- entry.loggedAt >= logInterval else {
                entry.unlogged += 1
                return nil
            }
            defer {
                entry.loggedAt = now
                entry.unlogged = 0
            }
            return (entry.unlogged, first)
        }
        guard let line else { return }
        var metadata: Logger.Metadata = ["storage.part": "\(part.rawValue)", "storage.error": "\(error)"]
        if !line.first { metadata["storage.failures.unlogged"] = "\(line.repeats)" }
        logger.error("storage write failed", metadata: metadata)
    }

    /// A write of `part` succeeded: if it was failing, it works again (logged once).
    public func succeeded(_ part: Part) {
        let recovered: (error: String, failures: Int)? = state.withLock { parts in
            guard var entry = parts[part], let error = entry.failing else { return nil }
            entry.failing = nil
            entry.unlogged = 0
            parts[part] = entry
            return (error, entry.failures)
        }
        guard let recovered else { return }
        logger.notice(
            "storage works again",
            metadata: [
                "storage.part": "\(part.rawValue)", "storage.failures": "\(recovered.failures)", "storage.last_error": "\(recovered.error)",
            ])
    }

    /// Records `result` of a write of `part`: `failed` with its error, or `succeeded`.
    public func record<Failure: Error>(_ part: Part, _ result: Result<Void, Failure>) {
        switch result {
        case .success: succeeded(part)
        case .failure(let error): failed(part, "\(error)")
        }
    }

    /// Every part's health, in `Part.allCases` order.
    public var reports: [Report] {
        state.withLock { parts in
            Part.allCases.map { Report(part: $0, failures: parts[$0]?.failures ?? 0, failing: parts[$0]?.failing) }
        }
    }

    /// Whether any part is failing now.
    public var isFailing: Bool { state.withLock { parts in parts.values.contains { $0.failing != nil } } }
}
