import ChatCore
import ChatProtocol
import ChatStorage
import Dispatch

/// Where rooms outlive memory: their identity (epoch), numbering (`seq`), topic and history.
///
/// `ChatCore` in durable mode notes how each room changes as it happens (`ChatCore.takeLogBatch()`)
/// and asks for a room back when someone joins it after it left memory; the server stages the
/// changes when it starts a commit (`stage`), commits once per event-loop turn and delivers the
/// turn's events only after the commit (docs/SERVER.md, "Durability"). Reads run off the
/// server's queue and answer later (`read`), so no read of the disk stalls the loop.
///
/// Every method is called on the server's queue.
public protocol RoomStore: AnyObject, Sendable {
    /// Adds the rooms' changes to the next commit: their records (newer ones replace those
    /// staged before), their events, and their occupancy (retention never deletes an occupied
    /// room, however long its members stay quiet; an empty one is deleted once it has been idle
    /// for the store's empty-room time).
    func stage(_ batch: LogBatch)

    /// Reads what `request` asks for off the caller's queue, then calls `completion` on `queue`
    /// with the answer; answers come in the order of the calls. A room is asked for only once
    /// its changes are committed (the core keeps an empty room until then), and a page holds
    /// only what is committed.
    func read(
        _ request: RoomRead, on queue: DispatchQueue,
        completion: @escaping @Sendable (Result<RoomReadAnswer, StorageError>) -> Void)

    /// Whether changes wait for the next `commitStaged`.
    var hasStagedChanges: Bool { get }

    /// Commits what is staged (possibly nothing) after every earlier commit, then calls
    /// `completion` on `queue`; completions come in the order of the calls. A failed commit
    /// stages its room records again, so the next commit retries them. A store that
    /// `commitsOnCallersQueue` commits before it returns and calls `completion` inside the call.
    func commitStaged(on queue: DispatchQueue, completion: @escaping @Sendable (Result<Void, CommitFailure>) -> Void)

    /// Whether `commitStaged` commits on the caller's queue, `completion` included, rather than
    /// on a thread of its own: the server then commits once at the end of each turn.
    var commitsOnCallersQueue: Bool { get }

    /// Runs now the completions of commits that have finished, in order; each completion runs
    /// once, here or when `commitStaged`'s hand-off reaches the queue, whichever comes first. The
    /// server calls it between requests, so a finished commit does not wait behind them.
    func runFinishedCommits()

    /// Waits for every commit to finish and stops background work. Call once, last.
    func close()

}

extension RoomStore {
    /// False: a store commits on a thread of its own unless it says otherwise.
    public var commitsOnCallersQueue: Bool { false }
}

extension RoomRead {
    /// Answers the read from `room` and `page`, the synchronous reads of a store: for the stores
    /// whose `read` runs them on a queue of their own, or at once.
    func answer(
        room: (String, Int) throws(StorageError) -> StoredRoom?,
        page: (String, HistoryDirection, UInt64, Int, Int, (HistoryEntry) -> Int) throws(StorageError) -> (
            entries: [HistoryEntry], complete: Bool
        )
    ) -> Result<RoomReadAnswer, StorageError> {
        do throws(StorageError) {
            switch self {
            case .room(let name, let recent):
                return .success(.room(try room(name, recent)))
            case .page(let name, let direction, let seq, let limit, let budget, let cost):
                let (entries, complete) = try page(name, direction, seq, limit, budget, cost)
                return .success(.page(entries: entries, complete: complete))
            }
        } catch {
            return .failure(error)
        }
    }
}

/// A commit that failed: why, and the events it did not store (their senders are told).
public struct CommitFailure: Error, Sendable {
    /// What SQLite said, as a storage error.
    public var error: StorageError
    /// The events of the failed commit.
    public var events: [StoredEvent]
}

extension StorageError {
    /// The error as the core takes it (`LogError`): the message, without SQLite's details.
    public var logError: LogError { LogError(message) }
}

extension ChatCore {
    /// `storageFailed(_:unstored:into:)` for a store's failed commit.
    public mutating func storageFailed(_ failure: CommitFailure, into actions: inout [ChatAction]) {
        storageFailed(failure.error.logError, unstored: failure.events, into: &actions)
    }
}

/// A `RoomStore` in memory, for the chat logic's tests: changes are "committed" as they are staged.
///
/// `@unchecked Sendable`: used on one queue (or one test) only, like the `ChatCore` it serves.
public final class MemoryRoomStore: RoomStore, @unchecked Sendable {
    private var rooms: [String: (record: RoomRecord, events: [HistoryEntry])] = [:]

    /// An empty store.
    public init() {}

    /// The stored record and events of `room`, for tests.
    public func stored(_ room: String) -> (record: RoomRecord, events: [HistoryEntry])? { rooms[room] }

    /// Removes the events of `room` up to `seq`, as retention would.
    public func forget(_ room: String, through seq: UInt64) {
        rooms[room]?.events.removeAll { $0.seq <= seq }
    }

    /// See `RoomStore.read(_:on:completion:)`: read at once, answered on `queue`.
    public func read(
        _ request: RoomRead, on queue: DispatchQueue,
        completion: @escaping @Sendable (Result<RoomReadAnswer, StorageError>) -> Void
    ) {
        let answer = request.answer(
            room: { name, recent in
                guard let room = rooms[name] else { return nil }
                return StoredRoom(
                    record: room.record, firstSeq: room.events.first?.seq ?? 0, recent: Array(room.events.suffix(recent)))
            },
            page: { name, direction, seq, limit, budget, cost in
                var history = RoomHistory(capacity: Int.max, byteCapacity: Int.max)
                for entry in rooms[name]?.events ?? [] { history.append(entry) }
                return history.page(direction, from: seq, limit: limit, budget: budget, cost: cost)
            })
        queue.async { completion(answer) }
    }

    /// See `RoomStore.stage(_:)`: committed at once, without retention.
    public func stage(_ batch: LogBatch) {
        for record in batch.rooms { stage(record, event: nil) }
        for event in batch.events { rooms[event.room]?.events.append(event.entry) }
    }

    /// Stores the room's `record` and, if given, its `event`.
    public func stage(_ record: RoomRecord, event: HistoryEntry?) {
        var room = rooms[record.name] ?? (record, [])
        room.record = record
        if let event { room.events.append(event) }
        rooms[record.name] = room
    }

    /// Always false: staging is committing.
    public var hasStagedChanges: Bool { false }

    /// Calls `completion` with success on `queue`.
    public func commitStaged(on queue: DispatchQueue, completion: @escaping @Sendable (Result<Void, CommitFailure>) -> Void) {
        queue.async { completion(.success(())) }
    }

    /// Does nothing: completions are already on their way.
    public func runFinishedCommits() {}

    /// Does nothing.
    public func close() {}
}
